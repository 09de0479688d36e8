# Apache-2.0
import pytest

from ansible_collections.smshare.kai.plugins.modules import mps_control

from smshare_gpu_harness import load_cases, run_case

HELP_V3 = {"args": ["-p", "3", "namespace", "--help"], "stdout": "create\ndelete\nget\nlist\nset\n"}


@pytest.mark.parametrize("case", load_cases("mps_control_cases.yaml"))
def test_mps_control(case, monkeypatch, tmp_path):
    binaries = case.get("binaries", ["nvidia-cuda-mps-control", "nvidia-smi"])
    run_case(monkeypatch, mps_control.main, case, tmp_path, binaries=binaries)


def test_a_refused_read_is_a_named_failure(monkeypatch, tmp_path):
    def denied(path):
        raise PermissionError(13, "Permission denied", path)
    monkeypatch.setattr(mps_control, "stat_directory", denied)
    run_case(monkeypatch, mps_control.main, {
        "args": {"pipe_directory": "{tmp}/pipe", "log_directory": "{tmp}/log"},
        "calls": [HELP_V3],
        "expected": {"failed": True, "failure": "failed", "commands": []},
        "msg_contains": ["Permission denied"]}, tmp_path)


def test_a_directory_the_host_refuses_is_a_named_failure(monkeypatch, tmp_path):
    def refused(path, uid, gid):
        raise PermissionError(1, "Operation not permitted", path)
    monkeypatch.setattr(mps_control.os, "chown", refused)
    run_case(monkeypatch, mps_control.main, {
        "args": {"pipe_directory": "{tmp}/pipe", "log_directory": "{tmp}/log", "directory_owner": "0"},
        "check_mode": False,
        "calls": [HELP_V3],
        "expected": {"failed": True, "failure": "directory_failed", "commands": [{"cmd": [
            "/usr/bin/nvidia-cuda-mps-control", "-d", "-p", "3"]}]},
        "msg_contains": ["could not prepare", "Operation not permitted"]}, tmp_path)


def test_stat_directory_finds_where_a_new_directory_would_go(tmp_path):
    (tmp_path / "file").write_text("x")
    deep = mps_control.stat_directory(str(tmp_path / "a" / "b" / "c"))
    assert deep["exists"] is False and deep["ancestor"] == str(tmp_path) and deep["ancestor_is_dir"]
    under_a_file = mps_control.stat_directory(str(tmp_path / "file" / "pipe"))
    assert under_a_file["ancestor"] == str(tmp_path / "file") and under_a_file["ancestor_is_dir"] is False
    here = mps_control.stat_directory(str(tmp_path))
    assert here["is_dir"] and here["mode"] is not None
