# Apache-2.0
"""gpu_holders_info in-process on a fake /proc tree, and its refusal of bad input."""
import functools
import os

import pytest

from ansible_collections.smshare.kai.plugins.module_utils import gpu_holders
from ansible_collections.smshare.kai.plugins.modules import gpu_holders_info

from module_runner import run_module


@pytest.fixture
def proc_tree(tmp_path, monkeypatch):
    def add(pid, comm, targets):
        base = tmp_path / str(pid)
        (base / "fd").mkdir(parents=True)
        (base / "comm").write_text(comm + "\n")
        (base / "cmdline").write_bytes(comm.encode() + b"\0")
        (base / "cgroup").write_text("0::/system.slice/x.service\n")
        for number, target in enumerate(targets):
            os.symlink(target, base / "fd" / str(number))
    monkeypatch.setattr(gpu_holders, "open_devices", functools.partial(gpu_holders.open_devices, str(tmp_path)))
    return add


@pytest.mark.parametrize("check_mode", [False, True])
def test_the_driver_stack_is_allowed_and_anything_else_named(monkeypatch, proc_tree, check_mode):
    proc_tree(10, "nvidia-persiste", ["/dev/nvidiactl"])
    proc_tree(20, "nv-fabricmanage", ["/dev/nvidia-nvswitchctl"])
    proc_tree(30, "sleep", ["/dev/nvidia0"])
    done = run_module(monkeypatch, gpu_holders_info.main, {"_ansible_check_mode": check_mode})
    assert not done.failed and done.result["changed"] is False
    assert [(p["pid"], p["allowed"]) for p in done.result["processes"]] == [(10, True), (20, True), (30, False)]
    assert [h["name"] for h in done.result["holders"]] == ["pid 30 (sleep)"]
    assert done.result["unreadable"] == 0


def test_allowed_processes_replace_the_defaults(monkeypatch, proc_tree):
    proc_tree(10, "nvidia-persiste", ["/dev/nvidiactl"])
    proc_tree(30, "sleep", ["/dev/nvidia0"])
    done = run_module(monkeypatch, gpu_holders_info.main, {"allowed_processes": ["sleep"]})
    assert [h["name"] for h in done.result["holders"]] == ["pid 10 (nvidia-persiste)"]


@pytest.mark.parametrize("name, words", [
    ("nvidia-persistenced", "1 to 15 characters"),
    ("/usr/bin/sleep", "no / or space"),
    ("", "must be set"),
    ("sle\nep", "control characters"),
])
def test_bad_input_is_refused(monkeypatch, proc_tree, name, words):
    done = run_module(monkeypatch, gpu_holders_info.main, {"allowed_processes": [name]})
    assert done.failed and done.result["failure"] == "bad_input"
    assert done.result["parameter"] == "allowed_processes" and words in done.result["msg"]
    assert "processes" not in done.result
