# Apache-2.0
import os
import re

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


# Names as the r615 daemon takes them (the fork's mpsctl/control_test.go
# TestValidNamespaceName and TestNamespaceCommandsRejectInvalidNames list these shapes).
@pytest.mark.parametrize("check, value, words", [
    (mps.namespace_name, "team-A", "lower-case letters, digits and '_' only"),
    (mps.namespace_name, "KAI_ABC", "lower-case letters"),
    (mps.namespace_name, "kai-abc", "lower-case letters"),
    (mps.namespace_name, "kai.abc", "lower-case letters"),
    (mps.namespace_name, "kai abc", "lower-case letters"),
    (mps.namespace_name, "kai/abc", "lower-case letters"),
    (mps.namespace_name, "k\u00e4i", "lower-case letters"),
    (mps.namespace_name, "pod_a\n", "control characters"),
    (mps.namespace_name, "-pod", "start with '-'"),
    (mps.namespace_name, "", "must be set"),
    (mps.namespace_name, "a" * 84, "at most 83"),
    (mps.server_name, "sha.red", "letters, digits, '_' and '-'"),
    (mps.server_name, "shared\x1b[0m", "control characters"),
    (mps.server_name, "a,b", "letters, digits, '_' and '-'"),
])
def test_names_the_daemon_would_refuse_are_refused_first(check, value, words):
    with pytest.raises(BadInput) as caught:
        check("namespaces[0].name", value)
    assert words in caught.value.msg, caught.value.msg


@pytest.mark.parametrize("value", ["a", "0", "_", "kai_abc_0011", "default", "shared",
                                   "kai_0f6b1f3e1111aaaa_3b0f5103c3bc1162b16d"])
def test_names_the_daemon_takes(value):
    assert mps.namespace_name("n", value) == value


def test_pipe_directory_length_is_checked_before_any_call():
    ok = "/run/nvidia-mps/shared/" + "a" * (83 - 23)   # exactly 83 characters
    assert mps.pipe_directory_fits("n", "a", ok) == ok
    with pytest.raises(BadInput) as caught:
        mps.pipe_directory_fits("namespaces[0].name", "a", ok + "a")
    assert "84 characters long, over the 83" in caught.value.msg
    assert mps.namespace_pipe_directory("/run/nvidia-mps/", "shared", "kai_a_1") == "/run/nvidia-mps/shared/kai_a_1"


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
@pytest.mark.parametrize("out, value", [("100.0\n", 100.0), ("50\n", 50.0), ("12.5\n", 12.5),
                                        ("50.0\nmps-control>\n", 50.0)])
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


def test_setters_accept_nothing_an_echo_or_a_prompt_only():
    assert mps.parse_nothing("") is None
    assert mps.parse_nothing("50.0\n") is None
    assert mps.parse_nothing("mps-control>\n") is None
    with pytest.raises(ValueError):
        mps.parse_nothing("Invalid active thread percentage: 500\n")


# `namespace list --server=S`: the guide's check 3 gives the values (two kai_*
# at 50.00, default at 10.00, `unlimited` in the pinned-memory column); the
# layout around them is not published, so headers, prompts and extra columns
# of any shape are read, and a line that is none of them fails, named.
GUIDE_ROWS = [
    {"namespace": "default", "active_thread_percentage": 10.0, "pinned_memory_limit_mib": None},
    {"namespace": "kai_0f6b1f3e1111aaaa_3b0f5103c3bc1162b16d", "active_thread_percentage": 50.0,
     "pinned_memory_limit_mib": None},
    {"namespace": "kai_7c2d9e4f2222bbbb_0e1f2a3b4c5d6e7f8091", "active_thread_percentage": 50.0,
     "pinned_memory_limit_mib": None},
]


@pytest.mark.parametrize("out", [
    # the stand-in's table
    "NAMESPACE                                  ACTIVE_THREAD_PERCENTAGE  PINNED_DEVICE_MEM_LIMIT\n"
    "default                                    10.00                     unlimited\n"
    "kai_0f6b1f3e1111aaaa_3b0f5103c3bc1162b16d  50.00                     unlimited\n"
    "kai_7c2d9e4f2222bbbb_0e1f2a3b4c5d6e7f8091  50.00                     unlimited\n",
    # other headers, a trailing column, percent signs, a prompt, commas
    "Namespace   Active thread %   Pinned memory   Clients\n"
    "default     10.00%            unlimited       0\n"
    "kai_0f6b1f3e1111aaaa_3b0f5103c3bc1162b16d  50.00%  unlimited  1\n"
    "kai_7c2d9e4f2222bbbb_0e1f2a3b4c5d6e7f8091  50.00%  unlimited  0\nmps-control>\n",
    "Namespaces on server 'shared':\n"
    "default,10.00,unlimited\n"
    "kai_0f6b1f3e1111aaaa_3b0f5103c3bc1162b16d,50.00,unlimited\n"
    "kai_7c2d9e4f2222bbbb_0e1f2a3b4c5d6e7f8091,50.00,unlimited\n",
])
def test_namespace_table_reads_the_guides_values_in_any_layout(out):
    assert mps.parse_namespace_table(out) == GUIDE_ROWS


def test_namespace_table_pinned_limits_and_an_empty_list():
    assert mps.parse_namespace_table("") == []
    rows = mps.parse_namespace_table("default 10.00 40960M\npod_a 25 40G\nkai_b 30 0\n")
    assert [r["pinned_memory_limit_mib"] for r in rows] == [40960, 40960, None]


@pytest.mark.parametrize("out, line", [
    ("NAME  PCT\nKAI_ABC  50.00  unlimited\n", "KAI_ABC  50.00  unlimited"),
    ("default 10.00 unlimited\nkai_a\n", "kai_a"),
    ("default 10.00 unlimited\nkai-a 50.00 unlimited\n", "kai-a 50.00 unlimited"),
    ("default 10.00 unlimited\npod_a ten unlimited\n", "pod_a ten unlimited"),
    ("default 10.00 forty\n", "default 10.00 forty"),
    ("default 150.00 unlimited\n", "default 150.00 unlimited"),
    ("default 10.00\ndefault 10.00\n", "default 10.00"),
])
def test_namespace_table_fails_naming_the_line(out, line):
    with pytest.raises(mps.Unparsable) as caught:
        mps.parse_namespace_table(out)
    assert caught.value.line == line and repr(line) in str(caught.value)


# `namespace get NAME SERVER pipe_directory`: the fork's parser takes the path
# bare, as key: value, key=value, quoted or as a CSV cell (TestParseAbsolutePath).
@pytest.mark.parametrize("out", [
    "/run/nvidia-mps/shared/kai_a_1\n", "pipe_directory: /run/nvidia-mps/shared/kai_a_1\n",
    "pipe_directory=/run/nvidia-mps/shared/kai_a_1", '"/run/nvidia-mps/shared/kai_a_1"',
    "kai_a_1,shared,/run/nvidia-mps/shared/kai_a_1", "/run/nvidia-mps/shared/kai_a_1/",
    "Querying namespace kai_a_1\n/run/nvidia-mps/shared/kai_a_1\nmps-control>",
])
def test_absolute_path_in_any_of_its_shapes(out):
    assert mps.parse_absolute_path(out) == "/run/nvidia-mps/shared/kai_a_1"


@pytest.mark.parametrize("out", ["Error: namespace 'kai_a_1' does not exist\n", "shared/kai_a_1\n", ""])
def test_no_absolute_path_is_a_failure(out):
    with pytest.raises(mps.Unparsable):
        mps.parse_absolute_path(out)


# `client list --format=csv,noheader` as the fork recorded it on driver 615.
def test_client_list_csv():
    out = ("3167082,srv,GPU-cc97390c-c189-71f5-1bb7-5b0af481fa0d,srv/default (0),VLLM::EngineCore\n"
           "3165259,shared,GPU-cc97390c-c189-71f5-1bb7-5b0af481fa0d,shared/kai_a_1 (2),python3 -m x, y\n")
    assert mps.parse_clients(out) == [
        {"pid": 3167082, "server": "srv", "device": "GPU-cc97390c-c189-71f5-1bb7-5b0af481fa0d",
         "namespace": "default", "command": "VLLM::EngineCore"},
        {"pid": 3165259, "server": "shared", "device": "GPU-cc97390c-c189-71f5-1bb7-5b0af481fa0d",
         "namespace": "kai_a_1", "command": "python3 -m x, y"}]
    assert mps.parse_clients("") == [] and mps.parse_clients("1234\nmps-control>\n")[0]["pid"] == 1234


@pytest.mark.parametrize("out", [
    "316...  srv  GPU-cc97390c-c189-71f5-1bb7-5b0af481fa0d  srv/default (0)  VLLM::EngineCore\n",  # the table
    "PID,SERVER,DEVICE,MAWS NS,CMD\n", "0,srv,GPU-1,srv/default (0),x\n", "4194305,srv,GPU-1,srv/default (0),x\n",
])
def test_client_list_refuses_what_is_not_a_pid(out):
    with pytest.raises(mps.Unparsable):
        mps.parse_clients(out)


@pytest.mark.parametrize("out, missing", [
    ("Usage: namespace <verb>\n  create  Create a namespace\n  delete  ...\n  get\n  list\n  set\n", []),
    ("namespace verbs: create | delete | list | set\n", ["get"]),
    ("Unknown option: -p\n", list(mps.NAMESPACE_VERBS)),
])
def test_namespace_help_lists_the_guides_five_verbs(out, missing):
    assert mps.v3_support(mps.parse_namespace_help(out))["missing"] == missing
    assert mps.v3_support(None) == {"supported": False, "verbs": [], "missing": list(mps.NAMESPACE_VERBS)}


# ---------------------------------------------------------------- the verb table
PARAMS = {"pid": 1, "percentage": 50, "device": 0, "limit": "40960M", "server": "s", "name": "n"}
CITATION = r"[\w.-]+/[\w.-]+ \S+ @ [0-9a-f]{40}"


@pytest.mark.parametrize("name", sorted(mps.VERBS))
def test_every_verb_renders_and_says_where_it_comes_from(name):
    verb = mps.VERBS[name]
    args, stdin, env = mps.render(name, **PARAMS)
    assert args or stdin
    assert stdin is None or (stdin.endswith("\n") and stdin.count("\n") == 1)
    assert callable(verb["parse"]) and verb["output"]
    assert verb["verified"] is None or re.match(CITATION, verb["verified"]), verb["verified"]
    if verb.get("protocol") == 3:
        assert args[:2] == ["-p", "3"] and stdin is None and env == {"CUDA_MPS_PROTOCOL_VERSION": "3"}
    else:
        assert verb.get("protocol") is None and "-p" not in args and env == {}


@pytest.mark.parametrize("name, params, argv", [
    # the fork's mpsctl/control_test.go TestNamespaceCommandArgs shapes
    ("namespace_create", {"name": "kai_abc_0011", "server": "shared"},
     "-p 3 namespace create kai_abc_0011 --server=shared"),
    ("namespace_set", {"name": "kai_abc_0011", "server": "shared", "percentage": 25},
     "-p 3 namespace set kai_abc_0011 --server=shared --active-thread-percentage=25"),
    ("namespace_delete", {"name": "kai_abc_0011", "server": "shared"},
     "-p 3 namespace delete kai_abc_0011 --server=shared"),
    ("namespace_get_pipe_directory", {"name": "kai_abc_0011", "server": "shared"},
     "-p 3 namespace get kai_abc_0011 shared pipe_directory"),
    ("namespace_list", {"server": "shared"}, "-p 3 namespace list --server=shared"),   # also the guide's query
    ("client_list", {}, "-p 3 client list --format=csv,noheader"),
    ("client_terminate", {"pid": 4242}, "-p 3 client terminate 4242"),
    ("namespace_help", {}, "-p 3 namespace --help"),
])
def test_v3_verbs_as_the_fork_sends_them(name, params, argv):
    assert mps.render(name, **params)[0] == argv.split()
    assert not any(a.startswith("--name") for a in mps.render(name, **params)[0])


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
    ("namespace_set", 1, "", "Insufficient privileges for UID 60000. 'NAMESPACE SET' requires server owner.\n",
     "permission_denied"),
    ("namespace_list", 1, "", "Error: server 'nosuch' not found\n", "unknown_server"),
    ("get_default_device_pinned_mem_limit", 0, "Invalid device: 7\n", "", "unknown_gpu"),
    ("namespace_list", 1, "", "Error: 'namespace list' requires protocol 3; the daemon runs protocol 2\n",
     "daemon_not_v3"),
    ("namespace_create", 1, "", "Error: namespace 'pod_a' already exists on server 'shared'\n", "failed"),
    ("namespace_get_pipe_directory", 0, "Error: namespace 'kai_a_1' does not exist\n", "", "unknown_namespace"),
    ("namespace_set", 1, "", "Error: namespace 'kai_a' on server 'shared' has 1 attached client(s)\n",
     "namespace_busy"),
    ("get_default_active_thread_percentage", 0, "Unrecognized command: x\n", "", "unparsable"),
    ("namespace_list", 0, "default 10.00 unlimited\nKAI_X 50 unlimited\n", "", "unparsable"),
])
def test_answers_become_named_failures(verb, rc, out, err, failure):
    control = mps.MpsControl(Recorder(), "/run/nvidia-mps")
    with pytest.raises(mps.MpsError) as caught:
        control.check(verb, CommandResult(["/usr/bin/nvidia-cuda-mps-control"], None, {}, rc, out, err))
    assert caught.value.kind == failure
    assert caught.value.details()["rc"] == rc
    if failure == "unparsable":
        assert "line" not in caught.value.msg or "'" in caught.value.msg


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
