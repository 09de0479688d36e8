# Apache-2.0
import os

import pytest

from ansible_collections.smshare.kai.plugins.module_utils import nvidia_smi
from ansible_collections.smshare.kai.plugins.module_utils.runner import CommandResult

FIELDS = [("index", "index", int), ("memory.total", "memory.total [MiB]", int),
          ("mig.mode.current", "mig.mode.current", str)]


def test_parse_csv_checks_header_and_maps_na():
    out = "index, memory.total [MiB], mig.mode.current\n0, 81920, Disabled\n1, 15360, [N/A]\n"
    assert nvidia_smi.parse_csv(out, FIELDS) == [
        {"index": 0, "memory_total_mib": 81920, "mig_mode": "Disabled"},
        {"index": 1, "memory_total_mib": 15360, "mig_mode": None}]
    with pytest.raises(ValueError):
        nvidia_smi.parse_csv("index, name\n0, x\n", FIELDS)
    with pytest.raises(ValueError):
        nvidia_smi.parse_csv("index, memory.total [MiB], mig.mode.current\n0, 1\n", FIELDS)


def test_cuda_version_from_banner():
    banner = "| NVIDIA-SMI 615.71.09    Driver Version: 615.71.09    CUDA Version: 13.4     |\n"
    assert nvidia_smi.parse_cuda_version(banner) == "13.4"
    with pytest.raises(ValueError):
        nvidia_smi.parse_cuda_version("No devices were found\n")


@pytest.mark.parametrize("out, rc, kind", [
    ("Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 615.71\n", 18,
     "driver_library_mismatch"),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
     "Make sure that the latest NVIDIA driver is installed and running.\n", 9, "driver_not_loaded"),
])
def test_named_driver_failures(out, rc, kind):
    with pytest.raises(nvidia_smi.NvidiaSmiError) as caught:
        nvidia_smi.check_driver(CommandResult(["nvidia-smi"], None, {}, rc, out, ""))
    assert caught.value.kind == kind
    assert caught.value.details()["rc"] == rc


def test_count_nvswitches(tmp_path):
    def device(name, vendor, pci_class):
        os.makedirs(str(tmp_path / name))
        (tmp_path / name / "vendor").write_text(vendor + "\n")
        (tmp_path / name / "class").write_text(pci_class + "\n")
    device("0000:07:00.0", "0x10de", "0x030200")   # a GPU
    device("0000:c1:00.0", "0x10de", "0x068000")   # an NVSwitch
    device("0000:00:1f.0", "0x8086", "0x068000")   # someone else's bridge
    assert nvidia_smi.count_nvswitches(str(tmp_path)) == 1
    assert nvidia_smi.count_nvswitches(str(tmp_path / "missing")) is None
