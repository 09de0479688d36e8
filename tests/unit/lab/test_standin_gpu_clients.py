"""The test image's stand-in nvidia-smi and deviceQuery against a real stand-in
MPS daemon (v3, multi-user) in a temporary folder: their output parses with
the smoke test's own parsers, memory follows the driver's cap, SMs follow what
the server grants (never the client's CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), and
the server's mps.ignore-cap flag and a missing driver fail as documented."""
import json
import os
import runpy
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.smshare.kai.plugins.module_utils import smoke_test as st

REPO = Path(__file__).resolve().parents[3]
TESTIMAGE = REPO / "lab" / "standin" / "testimage"
MPS = REPO / "lab" / "standin" / "bin" / "nvidia-cuda-mps-control"
GPU = {"index": 0, "uuid": "GPU-00000000-1111-2222-3333-444444444444", "name": "NVIDIA A100-SXM4-80GB",
       "memory_mib": 81920, "sm_count": 108}

sys.path.insert(0, str(TESTIMAGE))
import gpuview  # noqa: E402


@pytest.fixture
def server(tmp_path):
    pipe = tmp_path / "pipe"
    config = tmp_path / "mps.toml"
    config.write_text("[servers.shared]\nuid = 0\n[servers.shared.namespaces.default]\nactive_thread_percentage = 10\n")
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=str(pipe), CUDA_MPS_LOG_DIRECTORY=str(tmp_path / "log"))
    env.pop("NVIDIA_STANDIN_ROOT", None)

    def control(*args):
        return subprocess.run([sys.executable, str(MPS), *args], env=env, capture_output=True, text=True,
                              timeout=30, check=False)
    started = control("-d", "-p", "3", "-m", "-a", str(config))
    assert started.returncode == 0, started.stderr
    made = control("-p", "3", "namespace", "create", "--server=shared", "--name=pod-uid-1",
                   "--active-thread-percentage=50", "--pinned-memory-limit=40960M")
    assert made.returncode == 0, made.stderr
    yield {"pipe": pipe, "control": control}
    pid_file = pipe / "nvidia-cuda-mps-control.pid"
    if pid_file.is_file():
        os.kill(int(pid_file.read_text()), signal.SIGTERM)


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
    return {"CUDA_MPS_PIPE_DIRECTORY": str(server["pipe"] / "shared" / "pod-uid-1"),
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


def test_namespace_list_parses_with_the_modules_parser(server):
    listed = server["control"]("-p", "3", "namespace", "list", "--server=shared")
    assert listed.returncode == 0, listed.stderr
    rows = {r["namespace"]: r for r in st.parse_namespace_list(listed.stdout)}
    assert rows["pod-uid-1"]["active_thread_percentage"] == 50 and rows["default"]["active_thread_percentage"] == 10
