# Apache-2.0
import pytest

from ansible_collections.smshare.kai.plugins.modules import mps_info

from smshare_gpu_harness import load_cases, run_case


@pytest.mark.parametrize("case", load_cases("mps_info_cases.yaml"))
def test_mps_info(case, monkeypatch, tmp_path):
    run_case(monkeypatch, mps_info.main, case, tmp_path,
             binaries=case.get("binaries", ["nvidia-cuda-mps-control"]))


def test_a_refused_read_is_a_named_failure(monkeypatch, tmp_path):
    from ansible_collections.smshare.kai.plugins.module_utils import mps

    def denied(self, **kwargs):
        raise PermissionError(13, "Permission denied", self.pipe_directory)
    monkeypatch.setattr(mps.MpsControl, "read_state", denied)
    run_case(monkeypatch, mps_info.main, {
        "args": {"pipe_directory": "{tmp}/pipe"},
        "calls": [{"args": ["-p", "3", "namespace", "--help"], "stdout": "create delete get list set\n"}],
        "expected": {"failed": True, "failure": "failed", "installed": True},
        "msg_contains": ["Permission denied"]}, tmp_path)
