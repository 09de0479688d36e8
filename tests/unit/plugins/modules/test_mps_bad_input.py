# Apache-2.0
"""Bad input to mps_control and mps_info, class by class and several values
each: refused with failure=bad_input naming the parameter and the rule, in a
real run and in check mode alike, before any command runs (the harness fails
on any call) and before anything is created."""
import os

import pytest

from ansible_collections.smshare.kai.plugins.modules import mps_control, mps_info

from smshare_gpu_harness import run_case

NS = {"server": "shared", "name": "pod_a", "active_thread_percentage": 50}


def ns(**changes):
    return {"namespaces": [dict(NS, **changes)]}


# (id, args, parameter, words in the message)
CONTROL = [
    # control characters and line breaks: anything that reaches argv, stdin or a path
    ("ns_name_newline", ns(name="pod_a\nquit"), "namespaces[0].name", "control characters"),
    ("ns_name_nul", ns(name="pod\x00a"), "namespaces[0].name", "control characters"),
    ("ns_name_escape", ns(name="pod\x1b[31m"), "namespaces[0].name", "control characters"),
    ("server_newline", ns(server="shared\n"), "namespaces[0].server", "control characters"),
    ("owner_newline", {"directory_owner": "root\n"}, "directory_owner", "control characters"),
    ("group_tab", {"directory_group": "ro\tot"}, "directory_group", "control characters"),
    ("pipe_dir_newline", {"pipe_directory": "{tmp}/pipe\n"}, "pipe_directory", "control characters"),
    ("log_dir_nul", {"log_directory": "{tmp}/lo\x00g"}, "log_directory", "control characters"),
    ("config_newline", {"config_file": "{tmp}/mps.toml\n"}, "config_file", "control characters"),
    ("size_newline", {"default_pinned_mem_limits": {"0": "40G\nquit"}}, "default_pinned_mem_limits[0]",
     "control characters"),
    ("gpu_key_newline", {"default_pinned_mem_limits": {"0\n": "40G"}}, "default_pinned_mem_limits key",
     "control characters"),
    ("mode_newline", {"pipe_directory_mode": "0755\n"}, "pipe_directory_mode", "control characters"),
    # a leading '-' where the tool reads arguments
    ("ns_name_dash", ns(name="-rf"), "namespaces[0].name", "start with '-'"),
    ("server_dash", ns(server="--help"), "namespaces[0].server", "start with '-'"),
    ("owner_dash", {"directory_owner": "-1"}, "directory_owner", "start with '-'"),
    # names the r615 daemon refuses, or that break its pipe directory
    ("ns_name_team_A", ns(name="team-A"), "namespaces[0].name", "lower-case letters, digits and '_' only"),
    ("ns_name_capitals", ns(name="PodA"), "namespaces[0].name", "lower-case letters"),
    ("ns_name_hyphen", ns(name="pod-a"), "namespaces[0].name", "lower-case letters"),
    ("ns_name_dot", ns(name="pod.a"), "namespaces[0].name", "lower-case letters"),
    ("ns_name_comma", ns(name="pod,a"), "namespaces[0].name", "lower-case letters"),
    ("server_comma", ns(server="a,b"), "namespaces[0].server", "letters, digits, '_' and '-'"),
    ("ns_name_blank", ns(name="pod a"), "namespaces[0].name", "lower-case letters"),
    ("ns_name_dotdot", ns(name=".."), "namespaces[0].name", "lower-case letters"),
    ("ns_name_slash", ns(name="a/b"), "namespaces[0].name", "lower-case letters"),
    ("ns_name_long", ns(name="a" * 84), "namespaces[0].name", "at most 83"),
    ("ns_pipe_dir_too_long", ns(name="a" * 60), "namespaces[0].name", "over the 83 the daemon can hold"),
    ("pipe_dir_too_long", {"pipe_directory": "/run/" + "p" * 80}, "pipe_directory", "over the 83"),
    ("ns_name_empty", ns(name=""), "namespaces[0].name", "must be set"),
    ("server_dot", ns(server="sha.red"), "namespaces[0].server", "letters, digits"),
    # paths: empty, relative, '.', '..', '//'
    ("pipe_dir_empty", {"pipe_directory": ""}, "pipe_directory", "must be set"),
    ("pipe_dir_relative", {"pipe_directory": "run/nvidia-mps"}, "pipe_directory", "absolute path"),
    ("pipe_dir_dot", {"pipe_directory": "./pipe"}, "pipe_directory", "absolute path"),
    ("pipe_dir_dotdot", {"pipe_directory": "{tmp}/../pipe"}, "pipe_directory", "normalised"),
    ("pipe_dir_double_slash", {"pipe_directory": "{tmp}//pipe"}, "pipe_directory", "normalised"),
    ("pipe_dir_inner_dot", {"pipe_directory": "{tmp}/./pipe"}, "pipe_directory", "normalised"),
    ("log_dir_relative", {"log_directory": "log"}, "log_directory", "absolute path"),
    ("log_dir_dotdot", {"log_directory": "/var/log/../../etc"}, "log_directory", "normalised"),
    ("config_relative", {"config_file": "mps.toml"}, "config_file", "absolute path"),
    ("config_dotdot", {"config_file": "{tmp}/../mps.toml"}, "config_file", "normalised"),
    ("config_missing", {"config_file": "{tmp}/nosuch.toml"}, "config_file", "existing file"),
    ("config_is_a_directory", {"config_file": "{tmp}"}, "config_file", "existing file"),
    # numbers out of range
    ("pct_0", {"default_active_thread_percentage": 0}, "default_active_thread_percentage", "between 1 and 100"),
    ("pct_101", {"default_active_thread_percentage": 101}, "default_active_thread_percentage",
     "between 1 and 100"),
    ("pct_negative", {"default_active_thread_percentage": -5}, "default_active_thread_percentage",
     "between 1 and 100"),
    ("ns_pct_0", ns(active_thread_percentage=0), "namespaces[0].active_thread_percentage", "between 1 and 100"),
    ("ns_pct_150", ns(active_thread_percentage=150), "namespaces[0].active_thread_percentage",
     "between 1 and 100"),
    ("timeout_0", {"timeout": 0}, "timeout", "between 1 and 3600"),
    ("timeout_negative", {"timeout": -1}, "timeout", "between 1 and 3600"),
    ("timeout_huge", {"timeout": 100000}, "timeout", "between 1 and 3600"),
    ("gpu_negative", {"default_pinned_mem_limits": {"-1": "40G"}}, "default_pinned_mem_limits key", "GPU index"),
    ("gpu_word", {"default_pinned_mem_limits": {"one": "40G"}}, "default_pinned_mem_limits key", "GPU index"),
    ("gpu_hex", {"default_pinned_mem_limits": {"0x1": "40G"}}, "default_pinned_mem_limits key", "GPU index"),
    ("gpu_too_high", {"default_pinned_mem_limits": {"4096": "40G"}}, "default_pinned_mem_limits key",
     "between 0 and 1023"),
    ("gpu_twice", {"default_pinned_mem_limits": {"0": "40G", "00": "20G"}}, "default_pinned_mem_limits",
     "twice"),
    # sizes: unknown units, no unit, nothing, fractions of a MiB
    ("size_gb", {"default_pinned_mem_limits": {"0": "40GB"}}, "default_pinned_mem_limits[0]", "unit K, M, G or T"),
    ("size_unknown_unit", {"default_pinned_mem_limits": {"0": "40X"}}, "default_pinned_mem_limits[0]",
     "unit K, M, G or T"),
    ("size_word", {"default_pinned_mem_limits": {"0": "forty"}}, "default_pinned_mem_limits[0]",
     "unit K, M, G or T"),
    ("size_bare_number", {"default_pinned_mem_limits": {"0": "40"}}, "default_pinned_mem_limits[0]",
     "unit K, M, G or T"),
    ("size_bare_int", {"default_pinned_mem_limits": {"0": 40}}, "default_pinned_mem_limits[0]",
     "unit K, M, G or T"),
    ("size_empty", {"default_pinned_mem_limits": {"0": ""}}, "default_pinned_mem_limits[0]", "must be set"),
    ("size_below_a_mib", {"default_pinned_mem_limits": {"0": "512K"}}, "default_pinned_mem_limits[0]",
     "whole number of MiB"),
    ("size_fraction", {"default_pinned_mem_limits": {"0": "1.3G"}}, "default_pinned_mem_limits[0]",
     "whole number of MiB"),
    ("size_list", {"default_pinned_mem_limits": {"0": ["40G"]}}, "default_pinned_mem_limits[0]",
     "must be a string"),
    # modes, owners, groups: checked before a directory is created
    ("mode_int", {"pipe_directory_mode": 755}, "pipe_directory_mode", "quoted octal string"),
    ("mode_not_octal", {"log_directory_mode": "0855"}, "log_directory_mode", "octal mode"),
    ("mode_symbolic", {"pipe_directory_mode": "u=rwx"}, "pipe_directory_mode", "octal mode"),
    ("owner_unknown", {"directory_owner": "no-such-user-smshare"}, "directory_owner", "exists on this host"),
    ("group_unknown", {"directory_group": "no-such-group-smshare"}, "directory_group", "exists on this host"),
    ("same_dir_two_modes", {"log_directory": "{tmp}/pipe", "pipe_directory_mode": "0755",
                            "log_directory_mode": "0700"}, "log_directory_mode", "must equal"),
    # combinations
    ("ns_twice", {"namespaces": [NS, NS]}, "namespaces[1].name", "listed twice"),
    ("ns_without_pct", ns(active_thread_percentage=None), "namespaces[0].active_thread_percentage", "required"),
    ("ns_default_absent", ns(name="default", state="absent", active_thread_percentage=None), "namespaces[0].name",
     "cannot be removed"),
    ("ns_protocol_2", dict(ns(), protocol=2), "namespaces", "MPS v3"),
    ("config_protocol_2", {"config_file": "{tmp}/mps.toml", "protocol": 2}, "config_file", "protocol: 3"),
    ("absent_with_pct", {"state": "absent", "default_active_thread_percentage": 50},
     "default_active_thread_percentage", "state: absent"),
    ("absent_with_ns", dict(ns(), state="absent"), "namespaces", "state: absent"),
]

INFO = [
    ("pipe_dir_relative", {"pipe_directory": "pipe"}, "pipe_directory", "absolute path"),
    ("pipe_dir_dotdot", {"pipe_directory": "{tmp}/../x"}, "pipe_directory", "normalised"),
    ("pipe_dir_newline", {"pipe_directory": "{tmp}/pipe\n"}, "pipe_directory", "control characters"),
    ("pipe_dir_empty", {"pipe_directory": ""}, "pipe_directory", "must be set"),
    ("log_dir_relative", {"log_directory": "log"}, "log_directory", "absolute path"),
    ("pipe_dir_is_a_file", {"pipe_directory": "{tmp}/mps.toml"}, "pipe_directory", "is not a directory"),
    ("device_negative", {"devices": [0, -1]}, "devices[1]", "between 0 and 1023"),
    ("device_huge", {"devices": [5000]}, "devices[0]", "between 0 and 1023"),
    ("servers_empty", {"servers": []}, "servers", "at least 1 item"),
    ("server_comma", {"servers": ["a,b"]}, "servers[0]", "letters, digits, '_' and '-'"),
    ("server_dash", {"servers": ["-x"]}, "servers[0]", "start with '-'"),
    ("server_newline", {"servers": ["shared\n"]}, "servers[0]", "control characters"),
]


def snapshot(root):
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            found[path] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return found


def refuse(monkeypatch, tmp_path, main, args, parameter, words, check_mode):
    (tmp_path / "mps.toml").write_text("[servers.shared]\n")
    base = {"pipe_directory": "{tmp}/pipe", "log_directory": "{tmp}/log"}
    before = snapshot(str(tmp_path))
    result = run_case(monkeypatch, main, {
        "args": dict(base, **args), "check_mode": check_mode, "calls": [],
        "expected": {"failed": True, "failure": "bad_input", "parameter": parameter},
        "msg_contains": [words, "Nothing was changed", parameter]}, tmp_path)
    assert "\n" not in result["msg"] and "\x00" not in result["msg"] and "\x1b" not in result["msg"]
    assert snapshot(str(tmp_path)) == before, "the host changed"


@pytest.mark.parametrize("check_mode", [False, True], ids=["run", "check"])
@pytest.mark.parametrize("args, parameter, words", [c[1:] for c in CONTROL], ids=[c[0] for c in CONTROL])
def test_mps_control_refuses(monkeypatch, tmp_path, args, parameter, words, check_mode):
    refuse(monkeypatch, tmp_path, mps_control.main, args, parameter, words, check_mode)


@pytest.mark.parametrize("args, parameter, words", [c[1:] for c in INFO], ids=[c[0] for c in INFO])
def test_mps_info_refuses(monkeypatch, tmp_path, args, parameter, words):
    refuse(monkeypatch, tmp_path, mps_info.main, args, parameter, words, False)
