# Apache-2.0
import pytest

from ansible_collections.smshare.kai.plugins.module_utils import nvidia_smi
from ansible_collections.smshare.kai.plugins.modules import gpu_info

from smshare_gpu_harness import load_cases, run_case


@pytest.mark.parametrize("case", load_cases("gpu_info_cases.yaml"))
def test_gpu_info(case, monkeypatch, tmp_path):
    # The PCI bus the module scans is {tmp}/pci (absent unless the case makes it).
    monkeypatch.setattr(nvidia_smi, "PCI_DEVICES", str(tmp_path / "pci"))
    case.setdefault("args", {})
    run_case(monkeypatch, gpu_info.main, case, tmp_path,
             binaries=case.get("binaries", ["nvidia-smi"]))
