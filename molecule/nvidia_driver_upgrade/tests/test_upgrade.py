# Apache-2.0
"""State after 580 -> 615 and a reboot on a PCIe node: 615 only, loaded; no
Fabric Manager or NSCQ without NVSwitches; persistenced left off as asked;
the role's deb822 entry instead of the hand-made one."""
import json

VERSION = "615.71.09-1"


def test_only_the_615_pin(host):
    assert host.package("nvidia-driver-pinning-615").is_installed
    assert not host.package("nvidia-driver-pinning-580").is_installed
    assert not host.file("/etc/apt/preferences.d/nvidia-driver-pinning-580").exists


def test_negative_nvidia_record_removed_rest_kept(host):
    prefs = host.file("/etc/apt/preferences.d/freeze-nvidia.pref")
    assert not prefs.contains("o=NVIDIA")
    assert prefs.contains("Pin: release o=Debian")


def test_driver_615_without_fabricmanager_or_nscq(host):
    for name in ("nvidia-driver-open", "nvidia-driver-615-open"):
        assert host.package(name).version == VERSION
    for name in ("nvidia-driver-580-open", "nvidia-fabricmanager", "libnvidia-nscq"):
        assert not host.package(name).is_installed, name


def test_keyring_from_the_controllers_deb_and_the_roles_entry_only(host):
    assert host.package("cuda-keyring").is_installed
    assert host.file("/var/cache/apt/archives/cuda-keyring_1.1-1_all.deb").exists
    assert not host.file("/etc/apt/sources.list.d/cuda-debian12-x86_64.list").exists
    assert host.file("/etc/apt/sources.list.d/cuda-debian12-x86-64.sources").contains("^URIs: http://")
    assert not host.file("/etc/apt/auth.conf.d/smshare-cuda-mirror.conf").exists


def test_615_loaded_after_reboot_with_nouveau_blacklisted(host):
    assert "Driver Version: 615.71.09" in host.check_output("nvidia-smi")
    image = json.loads(host.file("/boot/initrd.img-%s" % host.check_output("uname -r")).content_string)
    assert "nouveau" in image["blacklist"]


def test_persistenced_left_off(host):
    service = host.service("nvidia-persistenced")
    assert not service.is_enabled
    assert not service.is_running
