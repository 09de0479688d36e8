"""The greedy-neighbour probe (plugins/module_utils/gpu_probe.py) against the lab's
stand-in driver (lab/standin/testimage/pylib/ctypes: libcuda.so.1 from the
container's driver view and its MPS server) and a real stand-in MPS daemon (v3,
multi-user) in a temporary folder, as a smoke pod runs it: each lab knob that
turns an enforcement off fails its own part of the greedy check and only that
(smoke_checks.check_greedy); and run as `python3 -c` with the stand-in first on
PYTHONPATH, as in the test image, on a host whose MPS server has a default
pinned memory limit (tests/gpu/run.sh's dry run)."""
import importlib.util
import io
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

from ansible_collections.smshare.kai.plugins.module_utils import gpu_probe as gp
from ansible_collections.smshare.kai.plugins.module_utils import smoke_checks as st

REPO = Path(__file__).resolve().parents[3]
TESTIMAGE = REPO / "lab" / "standin" / "testimage"
PYLIB = TESTIMAGE / "pylib"
MPS = REPO / "lab" / "standin" / "bin" / "nvidia-cuda-mps-control"
GPU = {"index": 0, "uuid": "GPU-00000000-1111-2222-3333-444444444444", "name": "NVIDIA A100-SXM4-80GB",
       "memory_mib": 81920, "sm_count": 108}
CAP = 40448   # (81920 - 1024) x 0.5, the binder's cap and fractiond's variables

sys.path.insert(0, str(TESTIMAGE))
import gpuview  # noqa: E402

# The stand-in ctypes under another name: the test process keeps the real one.
_SPEC = importlib.util.spec_from_file_location("standin_ctypes", str(PYLIB / "ctypes" / "__init__.py"))
standin = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(standin)


def start_daemon(base, toml, protocol=("-p", "3", "-m")):
    pipe = base / "pipe"
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=str(pipe), CUDA_MPS_LOG_DIRECTORY=str(base / "log"))
    for key in ("NVIDIA_STANDIN_ROOT", "CUDA_MPS_PROTOCOL_VERSION"):
        env.pop(key, None)

    def control(*args, stdin=None):
        return subprocess.run([sys.executable, str(MPS), *args], env=env, capture_output=True, text=True,
                              input=stdin, timeout=30, check=False)
    args = ["-d", *protocol]
    if toml:
        (base / "mps.toml").write_text(toml)
        args += ["-a", str(base / "mps.toml")]
    started = control(*args)
    assert started.returncode == 0, started.stderr
    return pipe, control


def stop_daemon(base, pipe):
    pid_file = pipe / "nvidia-cuda-mps-control.pid"
    if pid_file.is_file():
        os.kill(int(pid_file.read_text()), signal.SIGTERM)
        for _attempt in range(50):
            if not (pipe / "control").exists():
                break
            time.sleep(0.1)
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def server():
    """mpsd's server: a pod's namespace capped at 50 %, the default namespace at 10 %, no pinned limit."""
    base = Path(tempfile.mkdtemp(prefix="sgp", dir="/tmp"))   # short: pipe directories stay under 83 characters
    pipe, control = start_daemon(base, "[servers.shared]\nuid = 0\n[servers.shared.namespaces.default]\n"
                                       "active_thread_percentage = 10\n")
    for made in (control("-p", "3", "namespace", "create", "kai_pod", "--server=shared"),
                 control("-p", "3", "namespace", "set", "kai_pod", "--server=shared",
                         "--active-thread-percentage=50")):
        assert made.returncode == 0, made.stderr
    yield {"pipe": pipe, "namespace": pipe / "shared" / "kai_pod"}
    stop_daemon(base, pipe)


INJECTED = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=%dM" % CAP,
            "NVIDIA_GPU_MEMORY_LIMIT": str(CAP), "NVIDIA_GPU_MEMORY_REQUEST": str(CAP)}


def in_pod(monkeypatch, tmp_path, role, device, env):
    """The probe as a smoke pod's container runs it: the runtime's driver view, fractiond's variables."""
    path = tmp_path / ("device-%s.json" % role)
    path.write_text(json.dumps(device))
    monkeypatch.setattr(gpuview, "DEVICE", str(path))
    for key in list(INJECTED) + ["CUDA_MPS_PIPE_DIRECTORY", "NVIDIA_STANDIN_ROOT"]:
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    out = io.StringIO()
    rc = gp.main(["--role", role], env=os.environ, out=out, load=lambda: (standin, standin.CDLL("libcuda.so.1")))
    return rc, gp.parse(out.getvalue())


def decisions():
    notes = {st.annotation("main", st.PORTION): "0.5", st.annotation("main", st.MEMORY_REQUEST): "%dMi" % CAP,
             st.annotation("main", st.DEVICES): GPU["uuid"]}
    return [st.binder_decision({"metadata": {"name": name, "annotations": notes}, "spec": {"nodeName": "lab"}})
            for name in ("fraction-greedy", "fraction-neighbour")]


# What each knob does to the driver view and the server (lab/standin/CONTRACT.md), and which part of the
# check fails: (knob, greedy SMs, greedy's allocation beyond its cap granted, words of the failure or None).
KNOBS = [
    ("none", 54, False, None),
    ("driver.memory-uncapped", 54, True, "GPU memory cap not enforced"),
    ("mps.ignore-cap", 108, False, "SM cap not enforced"),
]


@pytest.mark.parametrize("knob, sms, beyond, words", KNOBS)
def test_each_enforcement_knob_fails_its_part_of_the_greedy_check(
        server, monkeypatch, tmp_path, knob, sms, beyond, words):
    device = {"gpus": [GPU], "memory_limit_mib": None if knob == "driver.memory-uncapped" else CAP}
    if knob == "mps.ignore-cap":
        (server["pipe"] / "standin-ignore-cap").touch()
    env = dict(INJECTED, CUDA_MPS_PIPE_DIRECTORY=str(server["namespace"]))
    rc, greedy = in_pod(monkeypatch, tmp_path, "greedy", device, env)
    assert rc == 0 and greedy["error"] is None, greedy
    assert greedy["asked"] == {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": None}
    assert greedy["multiprocessors"] == sms and greedy["device"] == GPU["name"]
    allocations = dict((a["what"], a) for a in greedy["allocations"])
    assert allocations["within"]["ok"] and allocations["beyond"]["ok"] is beyond
    if not beyond:
        assert allocations["beyond"]["result"] == "CUDA_ERROR_OUT_OF_MEMORY" and allocations["beyond"]["code"] == 2
    rc, neighbour = in_pod(monkeypatch, tmp_path, "neighbour", device, env)
    assert rc == 0 and neighbour["multiprocessors"] == sms and neighbour["allocations"][0]["ok"]
    check = st.check_greedy("lab", 0.5, decisions(), greedy, neighbour, GPU["sm_count"])
    if words is None:
        assert check["passed"], check["message"]
    else:
        assert not check["passed"] and check["message"].startswith(words), check["message"]
        other = "SM cap not enforced" if words.startswith("GPU memory") else "GPU memory cap not enforced"
        assert other not in check["message"]


def test_the_pods_own_pinned_limit_binds_it_when_the_driver_does_not(server, monkeypatch, tmp_path):
    """A client that keeps CUDA_MPS_PINNED_DEVICE_MEM_LIMIT is held by it without a driver cap: only
    the greedy one, which drops it, gets past its cap (the cap then rests on the variable alone)."""
    device = {"gpus": [GPU], "memory_limit_mib": None}
    env = dict(INJECTED, CUDA_MPS_PIPE_DIRECTORY=str(server["namespace"]))
    rc, neighbour = in_pod(monkeypatch, tmp_path, "neighbour", device, env)
    assert rc == 0 and neighbour["allocations"][0]["ok"]
    lib = standin.CDLL("libcuda.so.1")   # the same client's environment, asking for more directly
    assert lib.cuInit(0) == 0 and lib.limits == {"GPU memory": 81920, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": CAP}
    pointer = standin.c_uint64()
    assert lib.cuMemAlloc_v2(standin.byref(pointer), standin.c_size_t((CAP + 1) << 20)) == 2
    assert lib.cuMemAlloc_v2(standin.byref(pointer), standin.c_size_t(CAP << 20)) == 0 and pointer.value


def test_without_fractiond_or_the_runtime_the_probe_says_why(server, monkeypatch, tmp_path):
    # fractiond not registered with NRI (lab knob fractiond.unregistered): no device, no variables
    rc, found = in_pod(monkeypatch, tmp_path, "greedy", {"gpus": [], "memory_limit_mib": None}, {})
    assert rc == 1 and found["error"] == "cuInit: CUDA_ERROR_NO_DEVICE (100)"
    # no NVIDIA runtime: no driver view, so no libcuda.so.1 to open
    monkeypatch.setattr(gpuview, "DEVICE", str(tmp_path / "none" / "device.json"))
    with pytest.raises(OSError, match="libcuda.so.1: cannot open shared object file"):
        standin.CDLL("libcuda.so.1")
    with pytest.raises(OSError, match="opens only libcuda.so.1"):
        standin.CDLL("libc.so.6")
    check = st.check_greedy("lab", 0.5, decisions(), found, None, 108, {"neighbour": "rc 1: "})
    assert "the probe could not run: cuInit: CUDA_ERROR_NO_DEVICE" in check["message"]


def test_the_stand_in_knows_only_the_probes_calls():
    lib = standin._Driver({"gpus": [GPU], "memory_limit_mib": CAP})
    assert lib.cuDeviceGet(standin.byref(standin.c_int()), 0) == 3   # before cuInit: CUDA_ERROR_NOT_INITIALIZED
    with pytest.raises(AttributeError, match="undefined symbol: cuLaunchKernel"):
        lib.cuLaunchKernel
    name = standin.c_char_p()
    assert lib.cuGetErrorName(2, standin.byref(name)) == 0 and name.value == b"CUDA_ERROR_OUT_OF_MEMORY"
    assert lib.cuGetErrorName(12345, standin.byref(name)) == 1


def test_as_python3_c_on_a_host_whose_server_has_a_default_pinned_limit(tmp_path):
    """tests/gpu/run.sh's dry run: protocol 2, the daemon's defaults (50 %, 40448M for GPU 0)
    bind every client; the greedy one asks 100 % and more memory and is held."""
    if os.path.exists("/run/nvidia-standin/device.json"):
        pytest.skip("this machine is a lab node (it has a container driver view)")
    base = Path(tempfile.mkdtemp(prefix="sgh", dir="/tmp"))
    pipe, control = start_daemon(base, None, protocol=())
    try:
        for line in ("set_default_active_thread_percentage 50", "set_default_device_pinned_mem_limit 0 %dM" % CAP):
            assert control(stdin=line + "\n").returncode == 0
        root = tmp_path / "root"
        (root / "run" / "nvidia-standin").mkdir(parents=True)
        (root / "run" / "nvidia-standin" / "loaded.json").write_text("{}")
        env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(PYLIB), "NVIDIA_STANDIN_ROOT": str(root),
               "CUDA_MPS_PIPE_DIRECTORY": str(pipe)}
        found = {}
        for role in ("greedy", "neighbour"):
            proc = subprocess.run([sys.executable, "-c", st.PROBE_SOURCE, "--role", role, "--cap-mib", str(CAP)],
                                  env=env, capture_output=True, text=True, timeout=60, check=False)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            found[role] = gp.parse(proc.stdout)
        assert [(a["what"], a["ok"]) for a in found["greedy"]["allocations"]] == [("within", True), ("beyond", False)]
        assert found["greedy"]["multiprocessors"] == found["neighbour"]["multiprocessors"] == 54
        assert st.check_greedy("host", 0.5, decisions(), found["greedy"], found["neighbour"], 108)["passed"]
        # without the server's default, nothing holds a client that drops its own limit
        assert control(stdin="set_default_device_pinned_mem_limit 0 0\n").returncode == 0
        proc = subprocess.run([sys.executable, "-c", st.PROBE_SOURCE, "--role", "greedy", "--cap-mib", str(CAP)],
                              env=env, capture_output=True, text=True, timeout=60, check=False)
        assert gp.parse(proc.stdout)["allocations"][1]["ok"] is True
    finally:
        stop_daemon(base, pipe)
