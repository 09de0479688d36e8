# Apache-2.0
"""The paths of tests/gpu/run.sh that need no GPU: it refuses plainly."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "tests" / "gpu" / "run.sh"
STANDIN = REPO / "lab" / "standin" / "bin"
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"

pytestmark = pytest.mark.skipif(shutil.which("nvidia-smi", path=SYSTEM_PATH) is not None,
                                reason="a real NVIDIA driver is installed here")


def run(tmp_path, tools, loaded=True):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in tools:
        (bin_dir / tool).symlink_to(STANDIN / tool)
    root = tmp_path / "root"
    driver = json.dumps({"version": "615.71.09", "branch": 615, "cuda_version": "13.4", "open": True})
    (root / "usr/share/nvidia-standin").mkdir(parents=True)
    (root / "usr/share/nvidia-standin/driver.json").write_text(driver)
    if loaded:
        (root / "run/nvidia-standin").mkdir(parents=True)
        (root / "run/nvidia-standin/loaded.json").write_text(driver)
    env = {"PATH": "%s:%s" % (bin_dir, SYSTEM_PATH), "NVIDIA_STANDIN_ROOT": str(root),
           "SMSHARE_GPU_PYTHON": sys.executable, "HOME": str(tmp_path)}
    evidence = tmp_path / "evidence"
    proc = subprocess.run(["bash", str(RUN), str(evidence)], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    record = json.loads((evidence / "gpu-evidence.json").read_text())
    return proc, record


def test_no_gpu(tmp_path):
    proc, record = run(tmp_path, [])
    assert proc.returncode == 3
    assert "no NVIDIA GPU here: nvidia-smi is not installed" in proc.stderr
    assert record["result"] == "not run" and record["exit_code"] == 3


def test_driver_not_loaded(tmp_path):
    proc, record = run(tmp_path, ["nvidia-smi"], loaded=False)
    assert proc.returncode == 3
    assert "couldn't communicate with the NVIDIA driver" in proc.stderr


def test_no_mps_control(tmp_path):
    proc, record = run(tmp_path, ["nvidia-smi"])
    assert proc.returncode == 4
    assert "nvidia-cuda-mps-control is not installed on this machine" in proc.stderr
    assert record["exit_code"] == 4


def test_no_pytorch(tmp_path):
    proc, record = run(tmp_path, ["nvidia-smi", "nvidia-cuda-mps-control"])
    assert proc.returncode == 5
    assert "no PyTorch" in proc.stderr


def test_half_rounded_down():
    sys.path.insert(0, str(REPO / "tests" / "gpu"))
    from gpu_check import half_rounded_down
    assert half_rounded_down(108) == 54
    assert half_rounded_down(132) == 66
    assert half_rounded_down(15) == 7
    assert half_rounded_down(132, 25) == 33


def dry_run(tmp_path, branch):
    """run.sh's whole path on the stand-ins, with a stand-in torch (no GPU)."""
    root = tmp_path / "root"
    driver = json.dumps({"version": "%d.71.09" % branch, "branch": branch, "cuda_version": "13.4",
                         "open": True})
    for path in ("usr/share/nvidia-standin/driver.json", "run/nvidia-standin/loaded.json"):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(driver)
    # a short work folder, as on a real node: MPS namespace pipe directories fit in 83 characters
    work = tempfile.mkdtemp(prefix="smshare-gpu-")
    env = dict(os.environ, PATH="%s:%s" % (STANDIN, os.environ["PATH"]), NVIDIA_STANDIN_ROOT=str(root),
               PYTHONPATH=str(REPO / "tests" / "gpu" / "standin_torch"), SMSHARE_GPU_PYTHON=sys.executable,
               SMSHARE_GPU_WORK=work, SMSHARE_GPU_PROBE_PATH=str(REPO / "lab" / "standin" / "testimage" / "pylib"))
    env.pop("OUT", None)
    try:
        proc = subprocess.run(["bash", str(RUN), str(tmp_path / "evidence")], env=env, capture_output=True,
                              text=True, timeout=400, check=False)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return proc, json.loads((tmp_path / "evidence" / "gpu-evidence.json").read_text())


def test_dry_run_on_standins_with_mps_v3(tmp_path):
    proc, record = dry_run(tmp_path, 615)
    assert proc.returncode == 0, proc.stderr
    checks = record["checks"]
    assert checks["client_gets_half_the_sms_despite_override"]["client_sms"] == 54
    assert checks["v3_namespace_caps_the_client"]["client_sms"] == 27
    for name in ("v3_bad_name_refused_before_any_call", "v3_namespace_created_capped_and_read_back",
                 "v3_client_listed_and_its_namespace_not_changed_while_attached", "v3_namespace_deleted",
                 "greedy_neighbour_held_to_its_caps", "greedy_probe_sm_count_matches_torch", "stopped_nothing_left"):
        assert checks[name]["passed"], (name, checks[name])
    recordings = record["recordings"]
    for verb in ("namespace_help", "namespace_list", "namespace_get_pipe_directory", "client_list"):
        assert recordings["v3:" + verb]["parse_error"] is None, (verb, recordings["v3:" + verb])
    assert recordings["v3:namespace_list"]["argv"] == ["-p", "3", "namespace", "list", "--server=shared"]  # the guide's
    assert recordings["v3:seed_namespace_list"]["rc"] == 0


def test_dry_run_on_standins_without_mps_v3(tmp_path):
    proc, record = dry_run(tmp_path, 580)
    assert proc.returncode == 0, proc.stderr
    assert "MPS v3 is not supported by this driver" in proc.stderr
    assert record["mps_v3"]["supported"] is False and "r615" in record["mps_v3"]["note"]
    assert "v3_namespace_caps_the_client" not in record["checks"]
    assert record["checks"]["client_gets_half_the_sms_despite_override"]["passed"]
    # the smoke test's greedy neighbour as run.sh runs it on a host: the daemon's defaults (50 %, a half-GPU
    # pod's pinned limit) hold the greedy client; both clients' results and the smoke test's verdict recorded
    found = record["greedy_neighbour"]
    assert found["cap_mib"] == 40448   # (81920 - 1024) / 2 on the stand-in A100-80GB
    greedy = dict((a["what"], a) for a in found["greedy"]["allocations"])
    assert greedy["within"]["ok"] and greedy["beyond"]["result"] == "CUDA_ERROR_OUT_OF_MEMORY"
    assert found["greedy"]["multiprocessors"] == found["neighbour"]["multiprocessors"] == 54
    assert found["greedy"]["asked"]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "100"
    check = record["checks"]["greedy_neighbour_held_to_its_caps"]
    assert "refused 45504 MiB (CUDA_ERROR_OUT_OF_MEMORY)" in check["message"]
    assert record["checks"]["greedy_probe_sm_count_matches_torch"] == {"probe": 54, "torch": 54, "passed": True}
