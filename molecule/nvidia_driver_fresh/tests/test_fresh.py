# Apache-2.0
"""State a fresh node is left in: 615 pinned, installed, loaded; Fabric Manager running."""
import json

VERSION = "615.71.09-1"


def test_branch_pin_and_no_other(host):
    assert host.package("nvidia-driver-pinning-615").is_installed
    assert not host.package("nvidia-driver-pinning-580").is_installed
    assert host.file("/etc/apt/preferences.d/nvidia-driver-pinning-615").contains("Pin: version 615.*")


def test_repository_entry(host):
    entry = host.file("/etc/apt/sources.list.d/cuda-debian12-x86_64.list")
    assert entry.contains(r"signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg\] http://.*/debian12/x86_64/ /")
    assert host.package("cuda-keyring").is_installed


def test_driver_and_fabricmanager_same_version(host):
    assert host.package("nvidia-driver-open").version == VERSION
    assert host.package("nvidia-driver-615-open").version == VERSION
    assert host.package("nvidia-fabricmanager").version == VERSION


def test_loaded_driver_is_615(host):
    out = host.check_output("nvidia-smi --query-gpu=driver_version --format=csv,noheader")
    assert set(out.split()) == {"615.71.09"}
    assert json.loads(host.file("/run/nvidia-standin/loaded.json").content_string)["branch"] == 615


def test_fabricmanager_enabled_and_running(host):
    service = host.service("nvidia-fabricmanager")
    assert service.is_enabled
    assert service.is_running
