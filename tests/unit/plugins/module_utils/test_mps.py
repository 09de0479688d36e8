# Apache-2.0
import os

import pytest
import yaml

from ansible_collections.smshare.kai.plugins.doc_fragments.mps import ModuleDocFragment
from ansible_collections.smshare.kai.plugins.module_utils import mps
from ansible_collections.smshare.kai.plugins.module_utils.runner import CommandResult
from ansible_collections.smshare.kai.plugins.module_utils.validate import BadInput


# ---------------------------------------------------------------- defaults
def test_documented_defaults_are_the_code_defaults():
    options = yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"]
    for key, spec in mps.ARGUMENT_SPEC.items():
        assert options[key]["default"] == spec["default"], key
        assert options[key]["type"] == spec["type"], key
    assert mps.ARGUMENT_SPEC["pipe_directory"]["default"] == mps.DEFAULT_PIPE_DIRECTORY
    assert mps.ARGUMENT_SPEC["log_directory"]["default"] == mps.DEFAULT_LOG_DIRECTORY


# ---------------------------------------------------------------- input rules
@pytest.mark.parametrize("text, mib", [
    ("40G", 40960), ("40960M", 40960), ("512m", 512), ("1T", 1048576), ("2GiB", 2048),
    ("0", None), ("1.5G", 1536), ("1024K", 1),
])
def test_size_to_mib(text, mib):
    assert mps.size_to_mib(text) == mib


@pytest.mark.parametrize("text", [
    "forty", "-1G", "40X", "", "G", "2GB", "40 G", "1073741824", "40", "512K", "1.3G", "0G", "40G\n", " 40G",
])
def test_size_to_mib_rejects(text):
    with pytest.raises(ValueError):
        mps.size_to_mib(text)


@pytest.mark.parametrize("value, words", [
    ("40GB", "unit K, M, G or T"), ("forty", "unit K, M, G or T"), ("512K", "whole number of MiB"),
    (40, "unit K, M, G or T"), ("40G\nquit", "control characters"), (["40G"], "must be a string"),
])
def test_memory_size_refusals_name_the_rule(value, words):
    with pytest.raises(BadInput) as caught:
        mps.memory_size("default_pinned_mem_limits[0]", value)
    assert words in caught.value.msg and "For example: 40G" in caught.value.msg


def test_memory_size_accepts_yaml_zero():
    assert mps.memory_size("x", 0) is None and mps.memory_size("x", "40G") == 40960


@pytest.mark.parametrize("check, value, words", [
    (mps.namespace_name, "pod,a", "must not contain ','"),
    (mps.namespace_name, "pod-a\n", "control characters"),
    (mps.namespace_name, "pod a", "letters, digits"),
    (mps.namespace_name, "-pod", "start with '-'"),
    (mps.namespace_name, "..", "letters, digits"),
    (mps.namespace_name, "a/b", "letters, digits"),
    (mps.namespace_name, "", "must be set"),
    (mps.namespace_name, "a" * 254, "at most 253"),
    (mps.server_name, "sha.red", "letters, digits, '_' and '-'"),
    (mps.server_name, "shared\x1b[0m", "control characters"),
    (mps.server_name, "a,b", "must not contain ','"),
])
def test_names_that_would_break_the_tool_are_refused(check, value, words):
    with pytest.raises(BadInput) as caught:
        check("namespaces[0].name", value)
    assert words in caught.value.msg, caught.value.msg
    assert caught.value.details() == {"failure": "bad_input", "parameter": "namespaces[0].name"}


def test_names_that_are_fine():
    assert mps.namespace_name("n", "fraction-smoke-a.0_1") == "fraction-smoke-a.0_1"
    assert mps.server_name("s", "shared") == "shared"


@pytest.mark.parametrize("check, value, words", [
    (mps.percentage, 0, "between 1 and 100"), (mps.percentage, 101, "between 1 and 100"),
    (mps.timeout, 0, "between 1 and 3600"), (mps.timeout, -5, "between 1 and 3600"),
    (mps.gpu_index, -1, "between 0 and 1023"), (mps.gpu_index, "one", "GPU index"),
    (mps.gpu_index, "0\n", "control characters"), (mps.gpu_index, "-1", "GPU index"),
    (mps.gpu_index, 4096, "between 0 and 1023"),
])
def test_numbers_out_of_range(check, value, words):
    with pytest.raises(BadInput) as caught:
        check("x", value)
    assert words in caught.value.msg


# ---------------------------------------------------------------- parsers
@pytest.mark.parametrize("out, value", [("100.0\n", 100.0), ("50\n", 50.0), ("12.5\n", 12.5)])
def test_percentage(out, value):
    assert mps.parse_percentage(out) == value


@pytest.mark.parametrize("out", ["", "0.0\n", "101\n", "Unrecognized command: x\n", "50\n60\n"])
def test_percentage_rejects(out):
    with pytest.raises(ValueError):
        mps.parse_percentage(out)


def test_mem_limit_and_server_status():
    assert mps.parse_mem_limit("40960M\n") == 40960 and mps.parse_mem_limit("0\n") is None
    assert mps.parse_server_status("ACTIVE\n") == "ACTIVE"
    for parse, out in ((mps.parse_mem_limit, "0\n0\n"), (mps.parse_mem_limit, ""),
                       (mps.parse_server_status, "Server 4242 not found\n"), (mps.parse_server_status, "")):
        with pytest.raises(ValueError):
            parse(out)


def test_pid_list():
    assert mps.parse_pid_list("") == []
    assert mps.parse_pid_list("12\n345\n") == [12, 345]
    with pytest.raises(ValueError):
        mps.parse_pid_list("Cannot find MPS control daemon process\n")


def test_setters_accept_nothing_or_an_echo_only():
    assert mps.parse_nothing("") is None
    assert mps.parse_nothing("50.0\n") is None
    with pytest.raises(ValueError):
        mps.parse_nothing("Invalid active thread percentage: 500\n")


NAMESPACES = [
    {"namespace": "default", "active_thread_percentage": 10, "pinned_memory_limit_mib": None, "client_priority": 0},
    {"namespace": "pod-a", "active_thread_percentage": 50, "pinned_memory_limit_mib": 40960, "client_priority": 1},
]


def test_namespace_csv():
    out = ("namespace, active_thread_percentage, pinned_memory_limit, client_priority\n"
           "default, 10, 0, 0\npod-a, 50, 40G, 1\n")
    assert mps.parse_namespaces(out) == NAMESPACES
    with pytest.raises(ValueError):
        mps.parse_namespaces("NAMESPACE  ACTIVE_THREAD_PERCENTAGE\ndefault  10\n")
    with pytest.raises(ValueError):  # why a comma in a namespace name is refused
        mps.parse_namespaces(out + "pod,b, 50, 0, 0\n")


def test_the_guides_namespace_table():
    out = ("NAMESPACE  ACTIVE_THREAD_PERCENTAGE  PINNED_MEMORY_LIMIT  CLIENT_PRIORITY\n"
           "default    10                        0                    0\n"
           "pod-a      50                        40960M               1\n")
    assert mps.parse_namespace_table(out) == NAMESPACES
    for bad in ("", "namespace, active_thread_percentage\n", out + "pod-b 50\n",
                out.replace("40960M", "forty")):
        with pytest.raises(ValueError):
            mps.parse_namespace_table(bad)


# ---------------------------------------------------------------- the verb table
PARAMS = {"pid": 1, "percentage": 50, "device": 0, "limit": "40960M", "server": "s", "name": "n"}


@pytest.mark.parametrize("name", sorted(mps.VERBS))
def test_every_verb_renders_and_v3_verbs_name_protocol_3(name):
    verb = mps.VERBS[name]
    args, stdin, env = mps.render(name, **PARAMS)
    assert args or stdin
    assert stdin is None or (stdin.endswith("\n") and stdin.count("\n") == 1)
    assert callable(verb["parse"]) and isinstance(verb["verified"], bool)
    if verb.get("protocol") == 3:
        assert args[:2] == ["-p", "3"] and stdin is None and env == {"CUDA_MPS_PROTOCOL_VERSION": "3"}
    else:
        assert verb.get("protocol") is None and "-p" not in args and env == {}


def test_the_guides_query_word_for_word():
    args, stdin, _env = mps.render("namespace_list_table", server="shared")
    assert ["nvidia-cuda-mps-control"] + args == \
        "nvidia-cuda-mps-control -p 3 namespace list --server=shared".split() and stdin is None
    assert mps.render("namespace_list", server="shared")[0] == \
        ["-p", "3", "namespace", "list", "--server=shared", "--format=csv"]
    assert mps.VERBS["namespace_list"]["verified"] is False  # until recorded on an r615 node
    assert mps.VERBS["get_server_list"]["verified"] is True


@pytest.mark.parametrize("name, params", [
    ("namespace_create", dict(PARAMS, name="a\nquit")),
    ("set_default_active_thread_percentage", dict(PARAMS, percentage="50\nquit")),
    ("namespace_delete", dict(PARAMS, server="s\x00")),
])
def test_render_never_sends_a_control_character(name, params):
    with pytest.raises(mps.MpsError) as caught:
        mps.render(name, **params)
    assert caught.value.kind == "bad_input"


class Recorder:
    def get_bin_path(self, arg, required=False, opt_dirs=None):
        return "/usr/bin/" + arg


@pytest.mark.parametrize("verb, rc, out, err, failure", [
    ("get_server_list", 1, "Cannot find MPS control daemon process\n", "", "not_running"),
    ("get_server_list", 1, "Cannot find MPS control daemon process\n",
     "Cannot connect to /run/nvidia-mps/control: Permission denied\n", "permission_denied"),
    ("namespace_list", 1, "", "Error: server 'nosuch' not found\n", "unknown_server"),
    ("get_default_device_pinned_mem_limit", 0, "Invalid device: 7\n", "", "unknown_gpu"),
    ("namespace_list", 1, "", "Error: 'namespace list' requires protocol 3; the daemon runs protocol 2\n",
     "daemon_not_v3"),
    ("namespace_create", 1, "", "Error: namespace 'pod-a' already exists\n", "failed"),
    ("get_default_active_thread_percentage", 0, "Unrecognized command: x\n", "", "unparsable"),
    ("server_list", 0, "NAME  PID\nshared  42\n", "", "unparsable"),
])
def test_answers_become_named_failures(verb, rc, out, err, failure):
    control = mps.MpsControl(Recorder(), "/run/nvidia-mps")
    with pytest.raises(mps.MpsError) as caught:
        control.check(verb, CommandResult(["/usr/bin/nvidia-cuda-mps-control"], None, {}, rc, out, err))
    assert caught.value.kind == failure
    assert caught.value.details()["rc"] == rc


# ---------------------------------------------------------------- the daemon
@pytest.mark.parametrize("cmdline, environ, flags", [
    (["nvidia-cuda-mps-control", "-d"], [], {"protocol": 2, "multiuser": False, "config_file": None}),
    (["/usr/bin/nvidia-cuda-mps-control", "-p", "3", "-m", "-f", "-a", "/etc/m.toml"], [],
     {"protocol": 3, "multiuser": True, "config_file": "/etc/m.toml"}),
    (["python3", "/usr/bin/nvidia-cuda-mps-control", "--protocol=3", "--apply=/x.toml"], [],
     {"protocol": 3, "config_file": "/x.toml"}),
    (["nvidia-cuda-mps-control", "-d", "-p", "3"], ["CUDA_MPS_PROTOCOL_VERSION=2"], {"protocol": 2}),
    (["nvidia-cuda-mps-control", "-d"], ["CUDA_MPS_PROTOCOL_VERSION=3"], {"protocol": 3}),
    (["nvidia-cuda-mps-control", "-d", "-p", "x"], [], {"protocol": 2}),  # never a traceback
])
def test_daemon_flags(cmdline, environ, flags):
    found = mps.daemon_flags(cmdline, environ)
    for key, value in flags.items():
        assert found[key] == value


def test_start_args_and_env():
    assert mps.start_args(3, True, "/etc/m.toml") == ["-d", "-p", "3", "-m", "-a", "/etc/m.toml"]
    assert mps.start_args(2, False, None) == ["-d"]
    assert mps.start_env(2) == {"CUDA_MPS_PROTOCOL_VERSION": "2"}


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data)


def test_find_daemon_reads_pid_file_and_proc(tmp_path):
    pipe, proc = str(tmp_path / "pipe"), str(tmp_path / "proc")
    assert mps.find_daemon(pipe, proc)["running"] is False
    write(pipe + "/nvidia-cuda-mps-control.pid", b"4242\n")
    found = mps.find_daemon(pipe, proc)
    assert found["running"] is False and found["stale_pid_file"] is True
    write(proc + "/4242/cmdline", b"nvidia-cuda-mps-control\0-d\0-p\0003\0-m\0")
    write(proc + "/4242/environ", b"PATH=/usr/bin\0")
    found = mps.find_daemon(pipe, proc)
    assert found["running"] and found["pid"] == 4242 and found["protocol"] == 3 and found["multiuser"]
    write(proc + "/4242/cmdline", b"/usr/bin/sleep\0100\0")  # pid reused by another program
    assert mps.find_daemon(pipe, proc)["running"] is False
    write(pipe + "/nvidia-cuda-mps-control.pid", b"garbage\n")
    assert mps.find_daemon(pipe, proc)["running"] is False


def test_config_file_servers():
    text = '''
schema_version = "1.0"
[servers.shared]
uid = 0
active_thread_percentage = "80"
[servers.shared.namespaces.default]
active_thread_percentage = "10"   # defense in depth
[servers.shared.namespaces.pod-a]
[servers.shared.namespaces."pod-b.0"]
active_thread_percentage = 25
[[servers.shared.devices]]
uuid = "GPU-1"
active_thread_percentage = "99"
[servers.training]
[features.memacct]
enabled = true
'''
    servers = mps.config_file_servers(text)
    assert sorted(servers) == ["shared", "training"]
    spaces = servers["shared"]["namespaces"]
    assert spaces["default"]["active_thread_percentage"] == 10.0
    assert spaces["pod-a"]["active_thread_percentage"] == 80.0
    assert spaces["pod-b.0"]["active_thread_percentage"] == 25.0
    assert servers["training"]["namespaces"] == {"default": {"active_thread_percentage": 100.0}}


@pytest.mark.parametrize("out, v3", [
    ("Usage ...\n  -p, --protocol <2|3>    Protocol 2 (legacy, default) or 3.\n", True),
    ("CUDA MPS Control for Linux/Unix.\nUsage: nvidia-cuda-mps-control [-d | -f]\n", False),
    ("", False),
    ("Cannot find MPS control daemon process\n", False),
])
def test_help_tells_whether_v3_exists(out, v3):
    assert mps.parse_help(out) is v3
