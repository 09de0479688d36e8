"""The test image's stand-in nvidia-smi and deviceQuery against a real stand-in
MPS daemon (v3, multi-user) in a temporary folder: their output parses with
the smoke test's own parsers, memory follows the driver's cap, SMs follow what
the server grants (never the client's CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), a
client stays attached while it runs, and the server's mps.ignore-cap flag and
a missing driver fail as documented."""
import json
import os
import runpy
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from ansible_collections.smshare.kai.plugins.module_utils import smoke_checks as st

REPO = Path(__file__).resolve().parents[3]
TESTIMAGE = REPO / "lab" / "standin" / "testimage"
MPS = REPO / "lab" / "standin" / "bin" / "nvidia-cuda-mps-control"
GPU = {"index": 0, "uuid": "GPU-00000000-1111-2222-3333-444444444444", "name": "NVIDIA A100-SXM4-80GB",
       "memory_mib": 81920, "sm_count": 108}

sys.path.insert(0, str(TESTIMAGE))
import gpuview  # noqa: E402


@pytest.fixture
def server():
    # a short pipe folder: the stand-in, like the real daemon, refuses pipe
    # directories over 83 characters, and pytest's tmp_path may be longer
    base = Path(tempfile.mkdtemp(prefix="smps", dir="/tmp"))
    pipe = base / "pipe"
    config = base / "mps.toml"
    config.write_text("[servers.shared]\nuid = 0\n[servers.shared.namespaces.default]\nactive_thread_percentage = 10\n")
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=str(pipe), CUDA_MPS_LOG_DIRECTORY=str(base / "log"))
    env.pop("NVIDIA_STANDIN_ROOT", None)
    env.pop("CUDA_MPS_PROTOCOL_VERSION", None)

    def control(*args):
        return subprocess.run([sys.executable, str(MPS), *args], env=env, capture_output=True, text=True,
                              timeout=30, check=False)
    started = control("-d", "-p", "3", "-m", "-a", str(config))
    assert started.returncode == 0, started.stderr
    # as the fork's mpsd does it: create (name positional), then cap
    for made in (control("-p", "3", "namespace", "create", "pod_uid_1", "--server=shared"),
                 control("-p", "3", "namespace", "set", "pod_uid_1", "--server=shared",
                         "--active-thread-percentage=50")):
        assert made.returncode == 0, made.stderr
    yield {"pipe": pipe, "control": control}
    pid_file = pipe / "nvidia-cuda-mps-control.pid"
    if pid_file.is_file():
        os.kill(int(pid_file.read_text()), signal.SIGTERM)
        for _attempt in range(50):
            if not (pipe / "control").exists():
                break
            time.sleep(0.1)
    shutil.rmtree(base, ignore_errors=True)


def run_tool(name, argv, monkeypatch, capsys, device, env):
    monkeypatch.setattr(gpuview, "DEVICE", str(device))
    for key in ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(sys, "argv", [name] + argv)
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(TESTIMAGE / name), run_name="__main__")
    return done.value.code or 0, capsys.readouterr().out


def device(tmp_path, limit):
    path = tmp_path / "device.json"
    path.write_text(json.dumps({"gpus": [GPU], "memory_limit_mib": limit}))
    return path


def client_env(server, requested="100"):
    return {"CUDA_MPS_PIPE_DIRECTORY": str(server["pipe"] / "shared" / "pod_uid_1"),
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": requested}


QUERY = ["--query-gpu=memory.total", "--format=csv,noheader"]


def test_nvidia_smi_shows_the_drivers_cap_whatever_the_env(tmp_path, monkeypatch, capsys):
    rc, out = run_tool("nvidia-smi", QUERY, monkeypatch, capsys, device(tmp_path, 40960),
                       {"NVIDIA_GPU_MEMORY_LIMIT": "81920"})
    assert rc == 0 and st.parse_smi_memory(out) == [40960]
    rc, out = run_tool("nvidia-smi", QUERY, monkeypatch, capsys, device(tmp_path, None), {})
    assert st.parse_smi_memory(out) == [81920]


def test_nvidia_smi_without_the_driver(tmp_path, monkeypatch, capsys):
    rc, out = run_tool("nvidia-smi", QUERY, monkeypatch, capsys, tmp_path / "absent" / "device.json", {})
    assert rc == 9 and "couldn't communicate with the NVIDIA driver" in out


def test_device_query_sees_the_servers_grant(server, tmp_path, monkeypatch, capsys):
    rc, out = run_tool("deviceQuery", [], monkeypatch, capsys, device(tmp_path, 40960), client_env(server))
    parsed = st.parse_device_query(out)
    assert rc == 0 and parsed["multiprocessors"] == 54 and parsed["device"] == GPU["name"]
    assert parsed["memory_mib"] == 81920   # the physical total, as the guide says
    rc, out = run_tool("deviceQuery", [], monkeypatch, capsys, device(tmp_path, 40960), client_env(server, "25"))
    assert st.parse_device_query(out)["multiprocessors"] == 27   # a client may lower its share


def test_device_query_when_the_server_ignores_its_caps(server, tmp_path, monkeypatch, capsys):
    (server["pipe"] / "standin-ignore-cap").touch()
    # fractiond replaced the client's 100 by 50: a server that enforces nothing still gives all SMs
    rc, out = run_tool("deviceQuery", [], monkeypatch, capsys, device(tmp_path, 40960), client_env(server, "50"))
    assert st.parse_device_query(out)["multiprocessors"] == 108


def test_device_query_without_the_driver(tmp_path, monkeypatch, capsys):
    rc, out = run_tool("deviceQuery", [], monkeypatch, capsys, tmp_path / "none" / "device.json", {})
    assert rc == 1 and st.parse_device_query(out)["result"] == "FAIL"


def test_namespace_list_shows_the_caps(server):
    listed = server["control"]("-p", "3", "namespace", "list", "--server=shared")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["NAMESPACE", "ACTIVE_THREAD_PERCENTAGE", "PINNED_DEVICE_MEM_LIMIT"]
    rows = {cells[0]: cells[1:] for cells in (line.split() for line in lines[1:])}
    assert rows == {"default": ["10.00", "unlimited"], "pod_uid_1": ["50.00", "unlimited"]}


def test_device_query_stays_attached_until_it_exits(server, tmp_path, monkeypatch, capsys):
    rc, _out = run_tool("deviceQuery", [], monkeypatch, capsys, device(tmp_path, 40960), client_env(server))
    assert rc == 0
    listed = server["control"]("-p", "3", "client", "list", "--format=csv,noheader")
    assert listed.stdout == "%d,shared,%s,shared/pod_uid_1 (1),deviceQuery\n" % (os.getpid(), GPU["uuid"])
    busy = server["control"]("-p", "3", "namespace", "delete", "pod_uid_1", "--server=shared")
    assert busy.returncode == 1 and "has 1 attached client(s)" in busy.stderr
