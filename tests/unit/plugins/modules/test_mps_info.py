# Apache-2.0
import pytest

from ansible_collections.smshare.kai.plugins.modules import mps_info

from smshare_gpu_harness import load_cases, run_case


@pytest.mark.parametrize("case", load_cases("mps_info_cases.yaml"))
def test_mps_info(case, monkeypatch, tmp_path):
    run_case(monkeypatch, mps_info.main, case, tmp_path,
             binaries=case.get("binaries", ["nvidia-cuda-mps-control"]))
