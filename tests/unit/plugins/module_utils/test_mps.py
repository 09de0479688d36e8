# Apache-2.0
import os

import pytest

from ansible_collections.smshare.kai.plugins.module_utils import mps


@pytest.mark.parametrize("text, mib", [
    ("40G", 40960), ("40960M", 40960), ("512m", 512), ("1T", 1048576), ("2GB", 2048),
    ("0", None), ("1073741824", 1024), ("1.5G", 1536),
])
def test_size_to_mib(text, mib):
    assert mps.size_to_mib(text) == mib


@pytest.mark.parametrize("text", ["forty", "-1G", "40X", "", "G"])
def test_size_to_mib_rejects(text):
    with pytest.raises(ValueError):
        mps.size_to_mib(text)


@pytest.mark.parametrize("out, value", [("100.0\n", 100.0), ("50\n", 50.0), ("12.5\n", 12.5)])
def test_percentage(out, value):
    assert mps.parse_percentage(out) == value


@pytest.mark.parametrize("out", ["", "0.0\n", "101\n", "Unrecognized command: x\n", "50\n60\n"])
def test_percentage_rejects(out):
    with pytest.raises(ValueError):
        mps.parse_percentage(out)


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


def test_namespace_csv_columns_are_checked():
    out = ("namespace, active_thread_percentage, pinned_memory_limit, client_priority\n"
           "default, 10, 0, 0\npod-a, 50, 40G, 1\n")
    assert mps.parse_namespaces(out) == [
        {"namespace": "default", "active_thread_percentage": 10, "pinned_memory_limit_mib": None,
         "client_priority": 0},
        {"namespace": "pod-a", "active_thread_percentage": 50, "pinned_memory_limit_mib": 40960,
         "client_priority": 1},
    ]
    with pytest.raises(ValueError):
        mps.parse_namespaces("NAMESPACE  ACTIVE_THREAD_PERCENTAGE\ndefault  10\n")


def test_every_verb_renders_and_parses_something():
    params = {"pid": 1, "percentage": 50, "device": 0, "limit": "40G", "server": "s", "name": "n"}
    for name, verb in mps.VERBS.items():
        args, stdin = mps.MpsControl.render(name, **params)
        assert args or stdin, name
        assert stdin is None or stdin.endswith("\n")
        assert callable(verb["parse"]) and isinstance(verb["verified"], bool)
        assert verb.get("protocol", 2) in (2, 3)


def test_the_seed_query_and_unverified_marks():
    args, stdin = mps.MpsControl.render("namespace_list", server="shared")
    assert args[:3] == ["namespace", "list", "--server=shared"] and stdin is None
    assert "namespace_list" in mps.unverified_verbs()
    assert "get_server_list" not in mps.unverified_verbs()


@pytest.mark.parametrize("cmdline, environ, flags", [
    (["nvidia-cuda-mps-control", "-d"], [], {"protocol": 2, "multiuser": False, "config_file": None}),
    (["/usr/bin/nvidia-cuda-mps-control", "-p", "3", "-m", "-f", "-a", "/etc/m.toml"], [],
     {"protocol": 3, "multiuser": True, "config_file": "/etc/m.toml", "foreground": True}),
    (["python3", "/usr/bin/nvidia-cuda-mps-control", "--protocol=3", "--apply=/x.toml"], [],
     {"protocol": 3, "config_file": "/x.toml"}),
    (["nvidia-cuda-mps-control", "-d", "-p", "3"], ["CUDA_MPS_PROTOCOL_VERSION=2"], {"protocol": 2}),
    (["nvidia-cuda-mps-control", "-d"], ["CUDA_MPS_PROTOCOL_VERSION=3"], {"protocol": 3}),
])
def test_daemon_flags(cmdline, environ, flags):
    found = mps.daemon_flags(cmdline, environ)
    for key, value in flags.items():
        assert found[key] == value


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


def test_config_file_servers():
    text = '''
schema_version = "1.0"
[servers.shared]
uid = 0
active_thread_percentage = "80"
[servers.shared.namespaces.default]
active_thread_percentage = "10"   # defense in depth
[servers.shared.namespaces.pod-a]
[[servers.shared.devices]]
uuid = "GPU-1"
[servers.training]
[features.memacct]
enabled = true
'''
    servers = mps.config_file_servers(text)
    assert sorted(servers) == ["shared", "training"]
    spaces = servers["shared"]["namespaces"]
    assert spaces["default"]["active_thread_percentage"] == 10.0
    assert spaces["pod-a"]["active_thread_percentage"] == 80.0
    assert servers["training"]["namespaces"] == {"default": {"active_thread_percentage": 100.0}}


@pytest.mark.parametrize("out, v3", [
    ("Usage ...\n  -p, --protocol <2|3>    Protocol 2 (legacy, default) or 3.\n", True),
    ("CUDA MPS Control for Linux/Unix.\nUsage: nvidia-cuda-mps-control [-d | -f]\n", False),
    ("", False),
    ("Cannot find MPS control daemon process\n", False),
])
def test_help_tells_whether_v3_exists(out, v3):
    assert mps.parse_help(out) is v3
