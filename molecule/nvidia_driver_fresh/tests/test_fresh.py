# Apache-2.0
"""State a fresh HGX node is left in: 615 pinned, installed and loaded behind
the mirror's login; Fabric Manager and NSCQ at the driver's upstream version
(other Debian revision); nouveau blacklisted in the initramfs and headers
installed before the driver; persistenced and Fabric Manager running."""
import json

DRIVER = "615.71.09-1"
KERNEL_CMD = "uname -r"


def dpkg_installs(host):
    """Package -> position of its first `install` line in dpkg.log."""
    order = {}
    for number, line in enumerate(host.file("/var/log/dpkg.log").content_string.splitlines()):
        fields = line.split()
        if len(fields) > 3 and fields[2] == "install":
            order.setdefault(fields[3].split(":")[0], (number, " ".join(fields[:2])))
    return order


def test_branch_pin_and_no_other(host):
    assert host.package("nvidia-driver-pinning-615").is_installed
    assert not host.package("nvidia-driver-pinning-580").is_installed


def test_one_deb822_entry_signed_by_the_keyring(host):
    entry = host.file("/etc/apt/sources.list.d/cuda-debian12-x86-64.sources")
    assert entry.contains("^Types: deb$")
    assert entry.contains("^URIs: https://.*/private/debian12/x86_64/$")
    assert entry.contains("^Suites: /$")
    assert entry.contains("^Signed-By: /usr/share/keyrings/cuda-archive-keyring.gpg$")
    assert not host.file("/etc/apt/sources.list.d/cuda-debian12-x86_64.list").exists
    assert host.package("cuda-keyring").is_installed


def test_mirror_login_only_in_apts_auth_file(host):
    auth = host.file("/etc/apt/auth.conf.d/smshare-cuda-mirror.conf")
    assert auth.user == "root" and auth.mode == 0o600
    # grep's basic regular expressions: no + or \S.
    assert auth.contains("^machine [0-9.]*:[0-9]*/private/ login mirror-[^ ]* password [^ ]*$")


def test_fabricmanager_and_nscq_share_the_drivers_upstream_version(host):
    assert host.package("nvidia-driver-open").version == DRIVER
    assert host.package("nvidia-driver-615-open").version == DRIVER
    # The repository's newest Fabric Manager of 615.71.09 is a repack (-2).
    assert host.package("nvidia-fabricmanager").version == "615.71.09-2"
    assert host.package("libnvidia-nscq").version == "615.71.09-1"


def test_loaded_driver_is_615_on_eight_gpus_with_persistence(host):
    out = host.check_output("nvidia-smi --query-gpu=driver_version,persistence_mode,pci.bus_id --format=csv,noheader")
    rows = [[c.strip() for c in line.split(",")] for line in out.splitlines()]
    assert len(rows) == 8
    assert {(r[0], r[1]) for r in rows} == {("615.71.09", "Enabled")}
    assert rows[0][2] == "00000000:07:00.0"


def test_nouveau_blacklisted_in_the_initramfs_before_the_driver(host):
    kernel = host.check_output(KERNEL_CMD)
    assert host.file("/etc/modprobe.d/blacklist-nouveau.conf").contains("^blacklist nouveau$")
    image = json.loads(host.file("/boot/initrd.img-%s" % kernel).content_string)
    assert "nouveau" in image["blacklist"]
    built = host.file("/var/log/smshare-standin/initramfs.log").content_string.splitlines()[0].split()[0]
    dkms_installed = dpkg_installs(host)["nvidia-dkms-615-open"][1]
    assert built.replace("T", " ")[:19] <= dkms_installed


def test_headers_installed_before_the_dkms_module_and_module_built(host):
    kernel = host.check_output(KERNEL_CMD)
    order = dpkg_installs(host)
    assert order["linux-headers-%s" % kernel][0] < order["nvidia-dkms-615-open"][0]
    built = json.loads(host.file("/lib/modules/%s/updates/dkms/nvidia.ko" % kernel).content_string)
    assert built["version"] == "615.71.09"


def test_persistenced_and_fabricmanager_enabled_and_running(host):
    for name in ("nvidia-persistenced", "nvidia-fabricmanager"):
        service = host.service(name)
        assert service.is_enabled, name
        assert service.is_running, name
