# Apache-2.0
import pytest

from ansible_collections.smshare.kai.plugins.modules import mps_control

from smshare_gpu_harness import load_cases, run_case


@pytest.mark.parametrize("case", load_cases("mps_control_cases.yaml"))
def test_mps_control(case, monkeypatch, tmp_path):
    binaries = case.get("binaries", ["nvidia-cuda-mps-control"])
    run_case(monkeypatch, mps_control.main, case, tmp_path, binaries=binaries)
