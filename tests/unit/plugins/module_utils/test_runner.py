# Apache-2.0
import pytest

from ansible_collections.smshare.kai.plugins.module_utils.runner import CommandRunner, ToolError


class FakeModule:
    def __init__(self, path):
        self.path = path
        self.seen = []

    def get_bin_path(self, arg, required=False, opt_dirs=None):
        return self.path

    def run_command(self, args, data=None, binary_data=False, environ_update=None, check_rc=False):
        self.seen.append((args, data, binary_data, environ_update))
        return 0, "out\n", ""


def test_run_records_exact_command_and_forces_c_locale():
    module = FakeModule("/usr/bin/tool")
    runner = CommandRunner(module, "tool", env={"A": "1"})
    result = runner.run(["x", 3], stdin="quit\n", env={"B": "2"})
    args, data, binary_data, environ = module.seen[0]
    assert args == ["/usr/bin/tool", "x", "3"] and data == "quit\n" and binary_data is True
    assert environ["LC_ALL"] == "C" and environ["A"] == "1" and environ["B"] == "2"
    assert result.as_dict() == {"cmd": ["/usr/bin/tool", "x", "3"], "stdin": "quit\n",
                                "env": {"A": "1", "B": "2"}, "rc": 0, "stdout": "out\n", "stderr": ""}
    assert runner.calls == [result]


def test_command_is_the_same_record_without_running():
    module = FakeModule("/usr/bin/tool")
    runner = CommandRunner(module, "tool")
    assert runner.command(["-d"]) == {"cmd": ["/usr/bin/tool", "-d"], "stdin": None, "env": {}}
    assert module.seen == []


def test_missing_binary():
    runner = CommandRunner(FakeModule(None), "tool")
    assert not runner.available
    assert runner.command(["-d"])["cmd"] == ["tool", "-d"]


def test_missing_binary_is_a_named_failure_not_a_traceback():
    runner = CommandRunner(FakeModule(None), "nvidia-cuda-mps-control")
    with pytest.raises(ToolError) as caught:
        runner.run(["-h"])
    assert caught.value.kind == "nvidia_cuda_mps_control_missing" and "not installed" in caught.value.msg
