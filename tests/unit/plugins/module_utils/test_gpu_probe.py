# Apache-2.0
"""The greedy-neighbour probe (module_utils/gpu_probe.py) on a fake driver library
called through the real ctypes: what each role asks for, which allocations it
makes, what it prints and why it fails. Against the lab's stand-in driver:
tests/unit/lab/test_standin_gpu_probe.py; on a GPU: tests/gpu/run.sh."""
import ctypes
import io
import os
import subprocess
import sys

import pytest

from ansible_collections.smshare.kai.plugins.module_utils import gpu_probe as gp

MIB = 1 << 20


class FakeDriver(object):
    """libcuda.so.1 as the probe calls it: `limit_mib` None allocates anything up to the GPU."""

    def __init__(self, sms=54, total_mib=81920, limit_mib=40448, fail=None):
        self.sms, self.total_mib, self.limit_mib, self.fail = sms, total_mib, limit_mib, fail or {}
        self.allocated, self.calls, self.env_at_init = 0, [], None

    def _call(self, name):
        self.calls.append(name)
        return self.fail.get(name, 0)

    def cuInit(self, flags):  # noqa: N802
        self.env_at_init = dict(os.environ)
        return self._call("cuInit")

    def cuDeviceGet(self, ref, ordinal):  # noqa: N802
        ref._obj.value = ordinal
        return self._call("cuDeviceGet")

    def cuDevicePrimaryCtxRetain(self, ref, device):  # noqa: N802
        ref._obj.value = 1
        return self._call("cuDevicePrimaryCtxRetain")

    def cuCtxSetCurrent(self, context):  # noqa: N802
        return self._call("cuCtxSetCurrent")

    def cuDeviceGetName(self, buffer, length, device):  # noqa: N802
        buffer.value = b"NVIDIA A100-SXM4-80GB"
        return self._call("cuDeviceGetName")

    def cuDeviceGetAttribute(self, ref, attribute, device):  # noqa: N802
        assert attribute == gp.ATTRIBUTE_MULTIPROCESSOR_COUNT
        ref._obj.value = self.sms
        return self._call("cuDeviceGetAttribute")

    def cuDeviceTotalMem_v2(self, ref, device):  # noqa: N802
        ref._obj.value = self.total_mib * MIB
        return self._call("cuDeviceTotalMem_v2")

    def cuMemAlloc_v2(self, ref, size):  # noqa: N802
        assert isinstance(size, ctypes.c_size_t)   # an int would be cut to 32 bits
        limit = self.total_mib if self.limit_mib is None else self.limit_mib
        if self.allocated + size.value > limit * MIB:
            return 2
        self.allocated += size.value
        ref._obj.value = 0x1000 + self.allocated
        return 0

    def cuGetErrorName(self, code, ref):  # noqa: N802
        names = {0: b"CUDA_SUCCESS", 2: b"CUDA_ERROR_OUT_OF_MEMORY", 100: b"CUDA_ERROR_NO_DEVICE"}
        if code not in names:
            return 1
        ref._obj.value = names[code]
        return 0


INJECTED = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=40448M",
            "NVIDIA_GPU_MEMORY_LIMIT": "40448", "NVIDIA_GPU_MEMORY_REQUEST": "40448"}


def probe(monkeypatch, argv, driver=None, env=None, load=None):
    """main() with the process environment `env` (the probe changes it as it would its own)."""
    for key in list(INJECTED) + ["NVIDIA_GPU_MEMORY_LIMITS"]:
        monkeypatch.delenv(key, raising=False)
    for key, value in (INJECTED if env is None else env).items():
        monkeypatch.setenv(key, value)
    driver = driver or FakeDriver()
    out = io.StringIO()
    rc = gp.main(argv, env=os.environ, out=out, load=load or (lambda: (ctypes, driver)))
    return rc, gp.parse(out.getvalue()), driver


def outcomes(result):
    return [(a["what"], a["mib"], a["ok"], a["result"]) for a in result["allocations"]]


# role, the driver's limit (None: nothing enforces memory) -> allocations, what the pod holds
CASES = [
    ("greedy_held", "greedy", 40448,
     [("within", 32358, True, "CUDA_SUCCESS"), ("beyond", 45504, False, "CUDA_ERROR_OUT_OF_MEMORY")], 32358),
    ("greedy_unenforced", "greedy", None,
     [("within", 32358, True, "CUDA_SUCCESS"), ("beyond", 45504, True, "CUDA_SUCCESS")], 77862),
    ("neighbour", "neighbour", 40448, [("within", 32358, True, "CUDA_SUCCESS")], 32358),
]


@pytest.mark.parametrize("role, limit, allocations, held", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_role_allocates_what_it_should(monkeypatch, role, limit, allocations, held):
    rc, result, driver = probe(monkeypatch, ["--role", role], FakeDriver(limit_mib=limit))
    assert rc == 0 and result["error"] is None
    assert outcomes(result) == allocations and result["held_mib"] == held
    assert (result["role"], result["device"], result["multiprocessors"], result["total_memory_mib"]) == (
        role, "NVIDIA A100-SXM4-80GB", 54, 81920)
    assert (result["cap_mib"], result["cap_from"]) == (40448, "NVIDIA_GPU_MEMORY_LIMIT")


def test_the_greedy_one_changes_its_own_environment_before_the_driver_reads_it(monkeypatch):
    rc, result, driver = probe(monkeypatch, ["--role", "greedy"])
    assert driver.env_at_init["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "100"
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in driver.env_at_init
    assert result["asked"] == {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": None}
    rc, result, driver = probe(monkeypatch, ["--role", "neighbour"])
    assert driver.env_at_init["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert driver.env_at_init["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=40448M" and result["asked"] == {}


# where the cap comes from: the variables fractiond injects (either spelling), else the pinned limit, or --cap-mib
CAPS = [
    ("singular", {"NVIDIA_GPU_MEMORY_LIMIT": "40448", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=1G"}, [],
     (40448, "NVIDIA_GPU_MEMORY_LIMIT")),
    ("plural", {"NVIDIA_GPU_MEMORY_LIMITS": "19968"}, [], (19968, "NVIDIA_GPU_MEMORY_LIMITS")),
    ("pinned_only", {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=40G,1=20G"}, [],
     (40960, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")),
    ("option_wins", {"NVIDIA_GPU_MEMORY_LIMIT": "40448"}, ["--cap-mib", "1024"], (1024, "--cap-mib")),
]


@pytest.mark.parametrize("env, extra, cap", [c[1:] for c in CAPS], ids=[c[0] for c in CAPS])
def test_the_cap_is_what_the_pod_was_given(monkeypatch, env, extra, cap):
    rc, result, _driver = probe(monkeypatch, ["--role", "neighbour"] + extra, env=env)
    assert rc == 0 and (result["cap_mib"], result["cap_from"]) == cap
    assert result["allocations"][0]["mib"] == cap[0] * 4 // 5


@pytest.mark.parametrize("text, mib", [("40448M", 40448), ("40G", 40960), ("512MB", 512), ("1GiB", 1024),
                                       ("2048K", 2), ("4096", None), ("lots", None), ("", None)])
def test_sizes(text, mib):
    assert gp.size_mib(text) == mib
    assert gp.pinned_mib("1=1G,0=%s" % text) == mib


def test_sizes_of_a_cap():
    assert gp.sizes(40448) == {"within": 32358, "beyond": 45504}
    assert gp.sizes(1024) == {"within": 819, "beyond": 1280}   # at least 256 MiB beyond


FAILURES = [
    ("no_cap", {}, None, "no GPU memory cap in the environment", 54),
    ("no_device", INJECTED, {"cuInit": 100}, "cuInit: CUDA_ERROR_NO_DEVICE (100)", None),
    ("unnamed_error", INJECTED, {"cuDeviceGet": 999}, "cuDeviceGet: CUresult 999 (999)", None),
]


@pytest.mark.parametrize("env, fail, words, sms", [c[1:] for c in FAILURES], ids=[c[0] for c in FAILURES])
def test_a_probe_that_cannot_run_says_why(monkeypatch, env, fail, words, sms):
    rc, result, _driver = probe(monkeypatch, ["--role", "greedy"], FakeDriver(fail=fail), env=env)
    assert rc == 1 and words in result["error"]
    assert result["multiprocessors"] == sms and result["allocations"] == []   # what it read before is kept


def test_no_driver_library(monkeypatch):
    def load():
        raise gp.ProbeError("cannot load libcuda.so.1 (not found): is the pod run by the NVIDIA runtime")
    rc, result, _driver = probe(monkeypatch, ["--role", "greedy"], load=load)
    assert rc == 1 and "NVIDIA runtime" in result["error"] and result["role"] == "greedy"


@pytest.mark.parametrize("argv", [[], ["--role", "glutton"], ["--role"], ["--role", "greedy", "--hold", "soon"],
                                  ["--cap-mib", "1", "--role", "greedy", "--what", "1"]])
def test_bad_arguments(monkeypatch, argv):
    rc, result, _driver = probe(monkeypatch, argv)
    assert rc == 2 and ("usage" in result["error"] or "not a valid value" in result["error"])


def test_the_result_line_is_found_in_a_log():
    text = "noise\n%s {\"role\": \"old\"}\nSMSHARE_GPU_PROBE not json\n%s{}\n%s {\"role\": \"greedy\"}\ntrailing\n" % (
        gp.MARKER, gp.MARKER, gp.MARKER)
    assert gp.parse(text) == {"role": "greedy"}
    assert gp.parse("") is None and gp.parse("SMSHARE_GPU_PROBE [1]") is None


def test_it_runs_alone_as_python3_c_and_says_when_there_is_no_driver(tmp_path):
    """What the pods run: the file's text, no Ansible, no collection on the path."""
    source = open(gp.__file__).read()
    env = {"PATH": os.environ.get("PATH", ""), "NVIDIA_GPU_MEMORY_LIMIT": "40448",
           "LD_LIBRARY_PATH": str(tmp_path)}   # no libcuda.so.1 here (a GPU machine would find its own)
    proc = subprocess.run([sys.executable, "-I", "-c", source, "--role", "neighbour"], env=env, cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=60, check=False)
    result = gp.parse(proc.stdout)
    if result.get("error") is None:
        pytest.skip("this machine has a CUDA driver")
    assert proc.returncode == 1 and "cannot load libcuda.so.1" in result["error"], proc.stdout + proc.stderr
