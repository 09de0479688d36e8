# Apache-2.0
"""container_runtime_info in-process on a folder of real sockets, links and files,
against what ansible.builtin.stat and slurp return for the same paths (the shapes
the preflight rows read), and its refusal of bad input."""
import base64
import os
import socket
import stat as st

import pytest

from ansible_collections.smshare.kai.plugins.modules import container_runtime_info

from module_runner import run_module


@pytest.fixture
def node(tmp_path):
    """A containerd node in a folder: the CRI and NRI sockets, a config, a containerd
    that prints its version."""
    listening = []

    def serve(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        server = socket.socket(socket.AF_UNIX)
        # Bound by its name from its folder: a socket's path may not exceed 107 bytes, a test's folder may.
        here = os.getcwd()
        os.chdir(str(path.parent))
        try:
            server.bind(path.name)
        finally:
            os.chdir(here)
        listening.append(server)
        return path

    root = tmp_path
    serve(root / "run/containerd/containerd.sock")
    serve(root / "var/run/nri/nri.sock")
    config = root / "etc/containerd/config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('version = 2\n[plugins."io.containerd.nri.v1.nri"]\n  disable = false\n')
    binary = root / "bin/containerd"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\necho 'containerd github.com/containerd/containerd v1.7.24 88bf19b'\n")
    binary.chmod(0o755)
    args = {"cri_socket": str(root / "run/containerd/containerd.sock"), "nri_socket": str(root / "var/run/nri/nri.sock"),
            "containerd_config": str(config), "containerd_binary": str(binary),
            "microk8s_dir": str(root / "var/snap/microk8s"),
            "k3s_cri_socket": str(root / "run/k3s/containerd/containerd.sock")}
    yield root, args, serve
    for server in listening:
        server.close()


@pytest.mark.parametrize("check_mode", [False, True])
def test_a_containerd_node_is_read_in_one_run(monkeypatch, node, check_mode):
    root, args = node[:2]
    done = run_module(monkeypatch, container_runtime_info.main, dict(args, _ansible_check_mode=check_mode))
    result = done.result
    assert not done.failed and result["changed"] is False
    assert result["cri"]["stat"]["exists"] and result["cri"]["stat"]["issock"] and not result["cri"]["stat"]["islnk"]
    assert result["nri"]["stat"]["issock"]
    assert result["microk8s"] == {"stat": {"exists": False}} and result["k3s"] == {"stat": {"exists": False}}
    assert result["cri_target"] == {}
    assert result["containerd_version"]["rc"] == 0
    assert "v1.7.24" in result["containerd_version"]["stdout"]
    config = result["containerd_config"]
    assert config["encoding"] == "base64"
    assert base64.b64decode(config["content"]).decode() == (root / "etc/containerd/config.toml").read_text()


def test_microk8s_link_is_read_as_a_link_and_its_target_as_the_socket(monkeypatch, node):
    root, args, serve = node
    target = serve(root / "var/snap/microk8s/common/run/containerd.sock")
    link = root / "opt/kai-runtime/containerd.sock"
    link.parent.mkdir(parents=True)
    os.symlink(str(target), str(link))
    done = run_module(monkeypatch, container_runtime_info.main,
                      dict(args, cri_socket=str(link), cri_socket_link_target=str(target)))
    cri = done.result["cri"]["stat"]
    assert cri["islnk"] and cri["lnk_source"] == str(target) and cri["lnk_target"] == str(target)
    assert not cri["issock"]
    assert done.result["cri_target"]["stat"]["issock"]
    assert done.result["microk8s"]["stat"]["isdir"]


def test_without_a_link_target_a_link_is_followed(monkeypatch, node):
    root, args = node[:2]
    link = root / "run/cri.sock"
    os.symlink(args["cri_socket"], str(link))
    done = run_module(monkeypatch, container_runtime_info.main, dict(args, cri_socket=str(link)))
    assert done.result["cri"]["stat"]["issock"] and not done.result["cri"]["stat"]["islnk"]


def test_what_is_missing_is_reported_not_failed(monkeypatch, node):
    root, args = node[:2]
    os.unlink(args["nri_socket"])
    os.unlink(args["containerd_config"])
    (root / "etc/containerd/config.toml").mkdir()           # a folder where the file should be
    done = run_module(monkeypatch, container_runtime_info.main,
                      dict(args, containerd_binary=str(root / "bin/no-containerd")))
    result = done.result
    assert not done.failed
    assert result["nri"] == {"stat": {"exists": False}}
    assert result["containerd_config"]["msg"].startswith("cannot read %s" % args["containerd_config"])
    assert "content" not in result["containerd_config"]
    assert result["containerd_version"]["rc"] is None and "cannot run" in result["containerd_version"]["msg"]


def test_a_regular_file_is_not_a_socket(monkeypatch, node):
    root, args = node[:2]
    os.unlink(args["cri_socket"])
    (root / "run/containerd/containerd.sock").write_text("")
    done = run_module(monkeypatch, container_runtime_info.main, args)
    found = done.result["cri"]["stat"]
    assert found["exists"] and found["isreg"] and not found["issock"]
    assert found["mode"] == "%04o" % st.S_IMODE(os.stat(args["cri_socket"]).st_mode)


def test_a_path_that_cannot_be_looked_at_fails_naming_it(monkeypatch, node):
    """As ansible.builtin.stat: missing is an answer, anything else an error."""
    args = node[1]
    through_a_file = args["containerd_config"] + "/nri.sock"
    done = run_module(monkeypatch, container_runtime_info.main, dict(args, nri_socket=through_a_file))
    assert done.failed and done.result["failure"] == "unreadable" and done.result["path"] == through_a_file
    assert done.result["msg"].startswith("cannot look at %s: Not a directory" % through_a_file)


def test_the_version_line_comes_without_its_line_break(monkeypatch, node):
    done = run_module(monkeypatch, container_runtime_info.main, node[1])
    assert done.result["containerd_version"]["stdout"] == "containerd github.com/containerd/containerd v1.7.24 88bf19b"


@pytest.mark.parametrize("name, value, words", [
    ("cri_socket", "run/containerd.sock", "must be an absolute path"),
    ("nri_socket", "/var/run/../nri.sock", "normalised"),
    ("containerd_config", "/etc/containerd/config.toml\n", "control characters"),
    ("cri_socket_link_target", "snap/microk8s.sock", "must be an absolute path"),
    ("containerd_binary", "--version", "must not start with '-'"),
    ("containerd_binary", "", "must be set"),
])
def test_bad_input_is_refused_before_anything_is_read(monkeypatch, node, name, value, words):
    args = node[1]
    done = run_module(monkeypatch, container_runtime_info.main, dict(args, **{name: value}))
    assert done.failed and done.result["failure"] == "bad_input"
    assert done.result["parameter"] == name and words in done.result["msg"]
    assert "cri" not in done.result
