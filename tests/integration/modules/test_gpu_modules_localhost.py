# Apache-2.0
"""gpu_info, mps_info and mps_control end to end through ansible-playbook on
localhost, with the stand-in nvidia-smi and nvidia-cuda-mps-control on PATH."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from ansible_collections.smshare.kai.plugins.module_utils import mps

REPO = Path(__file__).resolve().parents[3]
STANDIN_BIN = REPO / "lab" / "standin" / "bin"
PLAYBOOKS = Path(__file__).resolve().parent / "playbooks"
A100 = {"name": "NVIDIA A100-SXM4-80GB", "memory_total_mib": 81920,
        "multiprocessor_count": 108, "compute_cap": "8.0"}


def write_json(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


@pytest.fixture
def standin(tmp_path):
    """A stand-in driver root (r615, loaded) and the environment to use it."""
    root = tmp_path / "root"
    driver = {"version": "615.71.09", "branch": 615, "cuda_version": "13.4", "open": True}
    write_json(root / "usr/share/nvidia-standin/driver.json", driver)
    write_json(root / "run/nvidia-standin/loaded.json", driver)
    write_json(root / "etc/nvidia-standin/gpus.json", {"gpus": [dict(
        A100, uuid="GPU-00000000-0000-0000-0000-00000000000%d" % i,
        pci_bus_id="00000000:%02x:00.0" % (7 + i)) for i in range(2)], "nvswitches": 0})
    env = dict(os.environ)
    env.update({
        "PATH": "%s:%s" % (STANDIN_BIN, env["PATH"]),
        "NVIDIA_STANDIN_ROOT": str(root),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_NOCOLOR": "1",
    })
    # short, as on a node: the daemon's namespace sockets must fit in 83 characters below it
    mps_root = Path(tempfile.mkdtemp(prefix="smshare-mps-"))
    yield {"root": root, "env": env, "mps_root": mps_root, "tmp": tmp_path}
    # never leave a daemon behind, whatever the test did
    for pid_file in mps_root.rglob("nvidia-cuda-mps-control.pid"):
        try:
            os.kill(int(pid_file.read_text()), signal.SIGTERM)
        except (ValueError, OSError):
            pass
    shutil.rmtree(mps_root, ignore_errors=True)


def playbook(standin, name, extra_vars, check=False):
    argv = ["ansible-playbook", "-i", "localhost,", "-c", "local", str(PLAYBOOKS / name),
            "-e", json.dumps(dict(extra_vars, ansible_python_interpreter="{{ ansible_playbook_python }}"))]
    if check:
        argv.append("--check")
    proc = subprocess.run(argv, env=standin["env"], capture_output=True, text=True, timeout=300,
                          check=False)
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        pytest.fail("no JSON from ansible-playbook (rc=%d): %s %s" % (proc.returncode, proc.stdout, proc.stderr))
    results = [host["localhost"] for play in report["plays"] for task in play["tasks"]
               for host in [task["hosts"]]]
    return proc.returncode, results


def daemon_pids(root):
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if any(arg.endswith(b"nvidia-cuda-mps-control") for arg in cmdline[:2]) and \
                str(root).encode() in environ:
            pids.append(int(entry.name))
    return pids


def test_mps_lifecycle(standin):
    rc, results = playbook(standin, "mps_lifecycle.yml", {"mps_root": str(standin["mps_root"])})
    failed = [r for r in results if r.get("failed")]
    assert rc == 0 and not failed, failed
    assert (standin["mps_root"] / "log" / "control.log").read_text().count("Starting control daemon") == 1
    assert oct((standin["mps_root"] / "pipe").stat().st_mode & 0o777) == "0o755"
    time.sleep(0.2)
    assert daemon_pids(standin["mps_root"]) == []


def standin_mps(standin, args, stdin=None, env=None):
    environ = dict(standin["env"], CUDA_MPS_PIPE_DIRECTORY=str(standin["mps_root"] / "pipe"),
                   CUDA_MPS_LOG_DIRECTORY=str(standin["mps_root"] / "log"))
    environ.pop("CUDA_MPS_PROTOCOL_VERSION", None)
    environ.update(env or {})
    return subprocess.run([str(STANDIN_BIN / "nvidia-cuda-mps-control")] + args, input=stdin, env=environ,
                          capture_output=True, text=True, timeout=30, check=False)


@pytest.fixture
def running_daemon(standin):
    """A v3 multi-user daemon with the shared server, started with the stand-in itself."""
    config = standin["mps_root"] / "mps.toml"
    config.write_text('schema_version = "1.0"\n[servers.shared]\nuid = 0\n'
                      '[servers.shared.namespaces.default]\nactive_thread_percentage = "10"\n'
                      '[servers.shared.namespaces.pod_a]\nactive_thread_percentage = "50"\n')
    proc = standin_mps(standin, ["-d", "-p", "3", "-m", "-a", str(config)])
    assert proc.returncode == 0, proc.stderr
    return standin


def host_state(standin):
    """Files under the MPS root (log lines of read-only connections left out),
    the daemon's settings and its processes."""
    files = {}
    for path in sorted(standin["mps_root"].rglob("*")):
        st = path.lstat()
        entry = (oct(st.st_mode), st.st_uid, st.st_gid)
        if path.suffix == ".log":
            entry += tuple(line.split("] ", 1)[-1] for line in path.read_text().splitlines()
                           if "Accepting connection" not in line)
        elif path.is_file():
            entry += (path.read_bytes(),)
        files[str(path)] = entry
    settings = standin_mps(standin, [], stdin="get_default_active_thread_percentage\n"
                           "get_default_device_pinned_mem_limit 0\n").stdout
    namespaces = standin_mps(standin, ["-p", "3", "namespace", "list", "--server=shared"]).stdout
    return files, settings, namespaces, sorted(daemon_pids(standin["mps_root"]))


def ns(**changes):
    return dict({"server": "shared", "name": "pod_b", "active_thread_percentage": 25}, **changes)


# (id, mps_control args, failure, words in the message); {root} is the MPS root
BAD_INPUT = [
    ("pct_101", {"default_active_thread_percentage": 101}, "bad_input", "between 1 and 100"),
    ("ns_pct_0", {"namespaces": [ns(active_thread_percentage=0)]}, "bad_input", "between 1 and 100"),
    ("ns_name_team_A", {"namespaces": [ns(name="team-A")]}, "bad_input", "lower-case letters, digits and '_' only"),
    ("ns_name_comma", {"namespaces": [ns(name="pod,b")]}, "bad_input", "lower-case letters"),
    ("ns_pipe_dir_too_long", {"namespaces": [ns(name="p" * 70)]}, "bad_input", "over the 83"),
    ("ns_name_newline", {"namespaces": [ns(name="pod_b\nquit")]}, "bad_input", "control characters"),
    ("server_dash", {"namespaces": [ns(server="--help")]}, "bad_input", "start with '-'"),
    ("pipe_dir_relative", {"pipe_directory": "run/nvidia-mps"}, "bad_input", "absolute path"),
    ("pipe_dir_dotdot", {"pipe_directory": "{root}/new/../pipe"}, "bad_input", "normalised"),
    ("pipe_dir_is_a_file", {"pipe_directory": "{root}/mps.toml"}, "bad_input", "is not a directory"),
    ("size_unknown_unit", {"default_pinned_mem_limits": {"0": "40GB"}}, "bad_input", "unit K, M, G or T"),
    ("size_bare_number", {"default_pinned_mem_limits": {"0": "40"}}, "bad_input", "unit K, M, G or T"),
    ("timeout_0", {"timeout": 0}, "bad_input", "between 1 and 3600"),
    ("mode_unquoted", {"pipe_directory": "{root}/new-pipe", "pipe_directory_mode": 755}, "bad_input",
     "quoted octal string"),
    ("owner_unknown", {"pipe_directory": "{root}/new-pipe", "directory_owner": "no-such-user-smshare"},
     "bad_input", "exists on this host"),
    ("config_missing", {"config_file": "{root}/nosuch.toml"}, "bad_input", "existing file"),
    ("unknown_server", {"default_active_thread_percentage": 30, "namespaces": [ns(server="other")]},
     "unknown_server", "has shared. Nothing was changed"),
    ("unknown_gpu", {"default_pinned_mem_limits": {"5": "40G"}}, "unknown_gpu", "GPU 5"),
    ("mismatch", {"multiuser": False, "default_active_thread_percentage": 30}, "mismatch",
     "multiuser True (wanted False)"),
]


def test_mps_bad_input_changes_nothing(running_daemon):
    """Each bad input, for real and in check mode, against a running daemon:
    the named failure and its words, and the host exactly as it was."""
    root = str(running_daemon["mps_root"])
    cases = [{"id": case_id, "args": json.loads(json.dumps(args).replace("{root}", root))}
             for case_id, args, _failure, _words in BAD_INPUT]
    before = host_state(running_daemon)
    rc, results = playbook(running_daemon, "mps_bad_input.yml", {"mps_root": root, "mps_cases": cases})
    assert rc == 0, results
    for task in results:
        assert len(task["results"]) == len(BAD_INPUT)
        for (case_id, _args, failure, words), result in zip(BAD_INPUT, task["results"]):
            assert result.get("failure") == failure and words in result.get("msg", ""), (case_id, result)
            assert result.get("commands", []) == [] and not result.get("changed"), (case_id, result)
    assert host_state(running_daemon) == before
    assert not (running_daemon["mps_root"] / "new-pipe").exists()


def test_driver_without_mps_v3_is_reported(standin):
    write_json(standin["root"] / "usr/share/nvidia-standin/driver.json",
               {"version": "580.105.08", "branch": 580, "cuda_version": "13.0", "open": True})
    rc, results = playbook(standin, "mps_converge.yml", {"mps_root": str(standin["mps_root"])})
    assert rc == 2 and results[-1]["failure"] == "v3_unsupported" and "r615" in results[-1]["msg"]
    assert daemon_pids(standin["mps_root"]) == []
    assert not (standin["mps_root"] / "pipe").exists()


def test_standin_answers_v3_verbs_only_with_protocol_3(running_daemon):
    """The stand-in's choice for a v3 verb without -p 3 (see mps.VERBS): refused.
    With -p 3 (or the variable) it answers the guide's query in the table the
    smoke test will parse with mps.parse_namespace_table."""
    guide = ["namespace", "list", "--server=shared"]
    without = standin_mps(running_daemon, guide)
    assert without.returncode == 1 and "-p 3" in without.stderr and without.stdout == ""
    with_p3 = standin_mps(running_daemon, ["-p", "3"] + guide)
    assert with_p3.returncode == 0, with_p3.stderr
    rows = mps.parse_namespace_table(with_p3.stdout)
    assert [(r["namespace"], r["active_thread_percentage"]) for r in rows] == [("default", 10), ("pod_a", 50)]
    assert all(r["pinned_memory_limit_mib"] is None for r in rows)   # the guide's `unlimited`
    by_variable = standin_mps(running_daemon, guide, env={"CUDA_MPS_PROTOCOL_VERSION": "3"})
    assert by_variable.returncode == 0 and by_variable.stdout == with_p3.stdout
    # a protocol 2 daemon refuses v3 verbs even with -p 3 (mps_info names it daemon_not_v3)
    standin_mps(running_daemon, [], stdin="quit\n")
    assert standin_mps(running_daemon, ["-d"]).returncode == 0
    on_v2 = standin_mps(running_daemon, ["-p", "3"] + guide)
    assert on_v2.returncode == 1 and "requires protocol 3" in on_v2.stderr
    standin_mps(running_daemon, [], stdin="quit\n")


def test_permission_denied_on_pipe_directory(standin):
    """A non-root user meets a root-only pipe directory."""
    pipe = standin["tmp"] / "pipe-root-only"
    env = dict(standin["env"], CUDA_MPS_PIPE_DIRECTORY=str(pipe),
               CUDA_MPS_LOG_DIRECTORY=str(standin["tmp"] / "log"))
    subprocess.run([str(STANDIN_BIN / "nvidia-cuda-mps-control"), "-d"], env=env, check=True, timeout=30)
    pipe.chmod(0o700)
    os.chmod(standin["tmp"], 0o755)
    proc = subprocess.run([str(STANDIN_BIN / "nvidia-cuda-mps-control")], input="get_server_list\n",
                          env=env, capture_output=True, text=True, user=65534, timeout=30,
                          check=False)
    assert proc.returncode == 1
    assert "Cannot find MPS control daemon process" in proc.stdout
    assert "Permission denied" in proc.stderr
    subprocess.run([str(STANDIN_BIN / "nvidia-cuda-mps-control")], input="quit\n", env=env,
                   check=True, text=True, timeout=30)


def test_gpu_info_reads_the_standin(standin):
    rc, results = playbook(standin, "gpu_info.yml", {"gpu_expect_gpus": 2, "gpu_expect_sms": 108})
    assert rc == 0 and not [r for r in results if r.get("failed")], results
    wanted = {"gpu_expect_gpus": 2, "gpu_expect_sms": 108}
    rc, results = playbook(standin, "gpu_info.yml", wanted, check=True)
    assert rc == 0, results


@pytest.mark.parametrize("loaded, failure", [
    (None, "driver_not_loaded"),
    ({"version": "610.10.01", "branch": 610, "cuda_version": "13.3", "open": True},
     "driver_library_mismatch"),
])
def test_gpu_info_names_driver_failures(standin, loaded, failure):
    loaded_file = standin["root"] / "run/nvidia-standin/loaded.json"
    if loaded is None:
        loaded_file.unlink()
    else:
        write_json(loaded_file, loaded)
    rc, results = playbook(standin, "gpu_info.yml", {"gpu_expect_gpus": 2, "gpu_expect_sms": 108})
    assert rc == 2 and results[0]["failure"] == failure, results[0]


def test_a_namespace_with_an_attached_client_is_not_changed(running_daemon):
    """MPS refuses `namespace set` and `delete` while a client is attached: mps_control reads the client
    list and refuses first, naming the client; once it is gone the change goes through."""
    pipe = running_daemon["mps_root"] / "pipe"
    env = dict(running_daemon["env"], CUDA_MPS_PIPE_DIRECTORY=str(pipe / "shared" / "pod_a"))
    holder = subprocess.Popen([sys.executable, str(REPO / "lab" / "standin" / "testimage" / "gpuview.py"), "hold",
                               "60"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        attached = json.loads(holder.stdout.readline())
        assert attached["active_thread_percentage"] == 50
        change = {"mps_root": str(running_daemon["mps_root"]),
                  "mps_input": {"multiuser": True, "config_file": str(running_daemon["mps_root"] / "mps.toml"),
                                "namespaces": [{"server": "shared", "name": "pod_a", "active_thread_percentage": 30}]}}
        before = host_state(running_daemon)
        rc, results = playbook(running_daemon, "mps_converge.yml", change)
        assert rc == 2 and results[-1]["failure"] == "namespace_busy", results[-1]
        assert "pod_a on server shared has 1 client attached (%d " % attached["pid"] in results[-1]["msg"]
        assert results[-1]["commands"] == [] and host_state(running_daemon)[1:] == before[1:]
    finally:
        holder.terminate()
        holder.wait(timeout=30)
    rc, results = playbook(running_daemon, "mps_converge.yml", change)
    assert rc == 0 and results[-1]["changed"], results[-1]
    assert [c["cmd"][1:] for c in results[-1]["commands"]] == [
        ["-p", "3", "namespace", "set", "pod_a", "--server=shared", "--active-thread-percentage=30"]]
    assert results[-1]["pipe_directories"] == {"shared": {"pod_a": str(pipe / "shared" / "pod_a")}}
