# Apache-2.0
"""gpu_info, mps_info and mps_control end to end through ansible-playbook on
localhost, with the stand-in nvidia-smi and nvidia-cuda-mps-control on PATH."""
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

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
    mps_root = tmp_path / "mps"
    mps_root.mkdir()
    yield {"root": root, "env": env, "mps_root": mps_root, "tmp": tmp_path}
    # never leave a daemon behind, whatever the test did
    for pid_file in tmp_path.rglob("nvidia-cuda-mps-control.pid"):
        try:
            os.kill(int(pid_file.read_text()), signal.SIGTERM)
        except (ValueError, OSError):
            pass


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


@pytest.mark.parametrize("mps_input, failure, text", [
    ({"default_active_thread_percentage": 101}, "bad_input", "1..100"),
    ({"default_active_thread_percentage": 0}, "bad_input", "1..100"),
    ({"pipe_directory": "FILE"}, "bad_input", "is not a directory"),
    ({"namespaces": [{"server": "nosuch", "name": "pod-a", "active_thread_percentage": 50}]},
     "unknown_server", "nosuch"),
    ({"namespaces": [{"server": "shared", "name": "pod-a", "active_thread_percentage": 500}]},
     "bad_input", "1..100"),
], ids=["pct_101", "pct_0", "pipe_dir_is_a_file", "unknown_server", "namespace_pct_500"])
def test_mps_bad_input_changes_nothing(standin, mps_input, failure, text):
    if mps_input.get("pipe_directory") == "FILE":
        path = standin["mps_root"] / "pipe-file"
        path.write_text("I am a file\n")
        mps_input = {"pipe_directory": str(path)}
    rc, results = playbook(standin, "mps_converge.yml",
                           {"mps_root": str(standin["mps_root"]), "mps_input": mps_input})
    assert rc == 2
    result = results[-1]
    assert result["failed"] and result["failure"] == failure and text in result["msg"], result
    assert not (standin["mps_root"] / "pipe").exists()
    assert not (standin["mps_root"] / "log").exists()
    assert daemon_pids(standin["mps_root"]) == []


def test_unknown_server_on_running_daemon_changes_nothing(standin):
    config = standin["mps_root"] / "mps.toml"
    config.write_text('schema_version = "1.0"\n[servers.shared]\nuid = 0\n')
    base = {"mps_root": str(standin["mps_root"])}
    rc, results = playbook(standin, "mps_converge.yml", dict(base, mps_input={"config_file": str(config)}))
    assert rc == 0, results
    before = (standin["mps_root"] / "log" / "control.log").read_text()
    rc, results = playbook(standin, "mps_converge.yml", dict(base, mps_input={
        "config_file": str(config), "default_active_thread_percentage": 30,
        "namespaces": [{"server": "other", "name": "a", "active_thread_percentage": 50}]}))
    assert rc == 2 and results[-1]["failure"] == "unknown_server"
    after = (standin["mps_root"] / "log" / "control.log").read_text()
    assert "active thread percentage set" not in after[len(before):]


def test_driver_without_mps_v3_is_reported(standin):
    write_json(standin["root"] / "usr/share/nvidia-standin/driver.json",
               {"version": "580.105.08", "branch": 580, "cuda_version": "13.0", "open": True})
    rc, results = playbook(standin, "mps_converge.yml", {"mps_root": str(standin["mps_root"])})
    assert rc == 2 and results[-1]["failure"] == "no_v3" and "r615" in results[-1]["msg"]
    assert daemon_pids(standin["mps_root"]) == []


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
