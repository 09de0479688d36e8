# Apache-2.0
"""State after 580 -> 615 and a reboot: 615 only, loaded, Fabric Manager running."""

VERSION = "615.71.09-1"


def test_only_the_615_pin(host):
    assert host.package("nvidia-driver-pinning-615").is_installed
    assert not host.package("nvidia-driver-pinning-580").is_installed
    assert not host.file("/etc/apt/preferences.d/nvidia-driver-pinning-580").exists


def test_negative_nvidia_entry_removed_rest_kept(host):
    prefs = host.file("/etc/apt/preferences.d/freeze-nvidia.pref")
    assert not prefs.contains("o=NVIDIA")
    assert prefs.contains("Pin: release o=Debian")


def test_driver_and_fabricmanager_615(host):
    for name in ("nvidia-driver-open", "nvidia-driver-615-open", "nvidia-fabricmanager"):
        assert host.package(name).version == VERSION
    assert not host.package("nvidia-driver-580-open").is_installed


def test_keyring_from_the_controllers_deb(host):
    assert host.package("cuda-keyring").is_installed
    assert host.file("/var/cache/apt/archives/cuda-keyring_1.1-1_all.deb").exists
    assert host.file("/etc/apt/sources.list.d/cuda-debian12-x86_64.list").exists


def test_615_loaded_after_reboot(host):
    out = host.check_output("nvidia-smi")
    assert "Driver Version: 615.71.09" in out


def test_fabricmanager_running(host):
    service = host.service("nvidia-fabricmanager")
    assert service.is_enabled
    assert service.is_running
