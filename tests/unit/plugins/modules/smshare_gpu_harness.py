# Apache-2.0
"""Runs the GPU/MPS modules in-process against canned command answers.

A case (YAML) gives the module args, the daemon states the pid-file/proc
probe returns (one per probe, the last one repeats), and the calls the module
must make in order: the argv after the binary, the stdin, and the canned
rc/stdout/stderr each call gets. An unexpected call fails the test.
After the run: `expected` (a subset of the result), `msg_contains`,
`absent_paths` (nothing created there) and `modes` (octal, of real paths).
"""
import json
import os

import pytest
import yaml

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

HERE = os.path.dirname(os.path.abspath(__file__))


class ModuleExit(Exception):
    def __init__(self, result):
        super().__init__(result)
        self.result = result


def load_cases(name):
    with open(os.path.join(HERE, name)) as handle:
        cases = yaml.safe_load(handle)
    return [pytest.param(case, id=case["id"]) for case in cases]


def substitute(value, tmp):
    """Replace {tmp} in every string of a case."""
    if isinstance(value, str):
        return value.replace("{tmp}", str(tmp))
    if isinstance(value, list):
        return [substitute(v, tmp) for v in value]
    if isinstance(value, dict):
        return dict((substitute(k, tmp), substitute(v, tmp)) for k, v in value.items())
    return value


def assert_subset(expected, actual, path="result"):
    if isinstance(expected, dict):
        assert isinstance(actual, dict), "%s: expected a dict, got %r" % (path, actual)
        for key, value in expected.items():
            assert key in actual, "%s: missing key %r in %r" % (path, key, actual)
            assert_subset(value, actual[key], "%s.%s" % (path, key))
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), (
            "%s: expected %d items, got %r" % (path, len(expected), actual))
        for index, (want, got) in enumerate(zip(expected, actual)):
            assert_subset(want, got, "%s[%d]" % (path, index))
    else:
        assert expected == actual, "%s: expected %r, got %r" % (path, expected, actual)


def run_case(monkeypatch, main, case, tmp_path, binaries=("nvidia-cuda-mps-control", "nvidia-smi")):
    case = substitute(case, tmp_path)
    for path in case.get("make_dirs", []):
        os.makedirs(path, exist_ok=True)
    for path, text in case.get("make_files", {}).items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(text.encode("latin-1"))
    for path, mode in case.get("chmod", {}).items():
        os.chmod(path, int(mode, 8))
    expected_calls = list(case.get("calls", []))
    sent = []

    def fake_bin_path(self, arg, required=False, opt_dirs=None):
        return "/usr/bin/" + arg if arg in binaries else None

    def fake_run_command(self, args, data=None, environ_update=None, **kwargs):
        entry = {"args": list(args[1:]), "stdin": data}
        sent.append(entry)
        assert expected_calls, "unexpected call %r (stdin %r)" % (args, data)
        call = expected_calls.pop(0)
        assert os.path.basename(args[0]) == call.get("binary", "nvidia-cuda-mps-control")
        assert entry["args"] == [str(a) for a in call.get("args", [])], "argv of call %d" % len(sent)
        assert data == call.get("stdin"), "stdin of call %d" % len(sent)
        assert environ_update.get("LC_ALL") == "C"
        for key, value in call.get("env", {}).items():
            assert environ_update.get(key) == value, "env %s of call %d" % (key, len(sent))
        for side in call.get("touch", []):  # e.g. the socket a started daemon creates
            open(side, "w").close()
        return call.get("rc", 0), call.get("stdout", ""), call.get("stderr", "")

    from ansible_collections.smshare.kai.plugins.module_utils import mps
    states = [dict(mps.NOT_RUNNING, **s) for s in case.get("daemon", [{}])]

    def fake_find_daemon(pipe_directory, proc_root="/proc"):
        return states.pop(0) if len(states) > 1 else states[0]

    warnings = []

    def exit_json(self, **result):
        result.setdefault("failed", False)
        if warnings:
            result["warnings"] = warnings
        raise ModuleExit(result)

    def fail_json(self, msg, **result):
        result.update(failed=True, msg=msg)
        raise ModuleExit(result)

    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", fake_bin_path)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", fake_run_command)
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, text: warnings.append(text))
    monkeypatch.setattr(mps, "find_daemon", fake_find_daemon)
    monkeypatch.setattr(mps.time, "sleep", lambda s: None)

    args = dict(case["args"])
    if case.get("check_mode"):
        args["_ansible_check_mode"] = True
    if case.get("diff"):
        args["_ansible_diff"] = True
    with patch_module_args(args):
        with pytest.raises(ModuleExit) as caught:
            main()
    result = json.loads(json.dumps(caught.value.result))
    assert not expected_calls, "calls never made: %r (made: %r)" % (expected_calls, sent)
    assert_subset(case["expected"], result)
    for text in case.get("msg_contains", []):
        assert text in result.get("msg", ""), "msg %r lacks %r" % (result.get("msg"), text)
    for path in case.get("absent_paths", []):
        assert not os.path.exists(path), "%s was created" % path
    for path, mode in case.get("modes", {}).items():
        assert "%04o" % (os.stat(path).st_mode & 0o7777) == mode, "mode of %s" % path
    return result
