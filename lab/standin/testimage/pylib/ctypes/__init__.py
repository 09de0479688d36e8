# STAND-IN (lab only) for Python's ctypes in the lab's test images, whose
# Python has none (lab/standin/forks/hack/standin-base.py copies only the
# modules the stand-ins import), and for the one C library it opens there:
# the NVIDIA driver's libcuda.so.1. It is NOT ctypes and NOT the driver: it
# knows the few types and the driver calls of the greedy-neighbour probe
# (plugins/module_utils/gpu_probe.py), answered from the lab's GPU the way a
# real driver answers a client (lab/standin/CONTRACT.md, "The greedy
# neighbour"):
#   - the device: the container's driver view /run/nvidia-standin/device.json
#     (the runtime wrote it: visible GPUs and the memory cap; absent: no
#     NVIDIA runtime, so no libcuda.so.1 to open); on a host (tests/gpu's dry
#     run) $NVIDIA_STANDIN_ROOT's loaded driver and GPU table;
#   - cuInit attaches to the MPS server of CUDA_MPS_PIPE_DIRECTORY, if any
#     (gpuview.py, the lab's client protocol): the SM count the client sees
#     is the share the server grants, whatever it asked;
#   - cuMemAlloc_v2 refuses (CUDA_ERROR_OUT_OF_MEMORY) what would take the
#     client past the lowest of: the driver's memory cap (device.json; lab
#     knob driver.memory-uncapped drops it), the server's default pinned
#     device memory limit, the client's own CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
#     (read at cuInit: the client may change it, which is what the greedy
#     probe does) and the GPU's memory. One client's allocations are not
#     counted against another's (no ledger across clients).
# Found first on the image's PYTHONPATH (/usr/lib/nvidia-standin/pylib);
# tests put this folder on a child process's PYTHONPATH only.
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import gpuview  # noqa: E402  (lab/standin/testimage/gpuview.py; /usr/lib/nvidia-standin in the image)

MIB = 1 << 20
# CUresult names and codes (CUDA driver API; cuda-python's driver.Result lists the same).
RESULTS = {0: "CUDA_SUCCESS", 1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY",
           3: "CUDA_ERROR_NOT_INITIALIZED", 100: "CUDA_ERROR_NO_DEVICE", 101: "CUDA_ERROR_INVALID_DEVICE",
           805: "CUDA_ERROR_MPS_CONNECTION_FAILED"}
MULTIPROCESSOR_COUNT = 16
HOST_GPU = {"index": 0, "uuid": "GPU-00000000-0000-0000-0000-000000000000", "name": "NVIDIA A100-SXM4-80GB",
            "memory_mib": 81920, "sm_count": 108}


class _Value(object):
    _default = 0

    def __init__(self, value=None):
        self.value = self._default if value is None else value


class c_int(_Value):  # noqa: N801 (ctypes' names)
    pass


class c_size_t(_Value):  # noqa: N801
    pass


class c_uint64(_Value):  # noqa: N801
    pass


class c_void_p(_Value):  # noqa: N801
    _default = None


class c_char_p(_Value):  # noqa: N801
    _default = None


class _Ref(object):
    def __init__(self, obj):
        self._obj = obj


def byref(obj):
    return _Ref(obj)


class _Buffer(object):
    def __init__(self, size):
        self.raw = b"\0" * size

    @property
    def value(self):
        return self.raw.split(b"\0", 1)[0]

    @value.setter
    def value(self, data):
        self.raw = (data + b"\0" * len(self.raw))[:len(self.raw)]


def create_string_buffer(size):
    return _Buffer(size)


def _number(arg):
    return arg.value if isinstance(arg, _Value) else int(arg)


def _pinned_mib(text):
    """Device 0's limit of a CUDA_MPS_PINNED_DEVICE_MEM_LIMIT value (`0=40448M`), in MiB."""
    units = {"K": 1.0 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
    for entry in (text or "").split(","):
        key, _sep, value = entry.partition("=")
        value = value.strip().upper().rstrip("B").rstrip("I")
        if key.strip() == "0" and value[-1:] in units:
            try:
                return int(float(value[:-1]) * units[value[-1]])
            except ValueError:
                return None
    return None


def _host_view():
    """A host's driver (tests/gpu's dry run): its loaded stand-in driver and GPU table."""
    root = os.environ.get("NVIDIA_STANDIN_ROOT", "")
    if not os.path.isfile(root + "/run/nvidia-standin/loaded.json"):
        return None
    try:
        with open(root + "/etc/nvidia-standin/gpus.json") as handle:
            gpus = json.load(handle)["gpus"]
    except (OSError, ValueError, KeyError):
        gpus = [HOST_GPU]
    return {"gpus": [dict(HOST_GPU, **{k: v for k, v in g.items() if k in HOST_GPU}) for g in gpus[:1]],
            "memory_limit_mib": None}


class _Driver(object):
    """libcuda.so.1 as the greedy-neighbour probe calls it."""

    def __init__(self, view):
        self.view = view
        self.gpu = None
        self.grant = None
        self.allocated = 0
        self.next_pointer = 0x7f0000000000
        self.limits = {}

    def __getattr__(self, name):
        raise AttributeError("libcuda.so.1: undefined symbol: %s (lab stand-in)" % name)

    def cuInit(self, _flags):  # noqa: N802 (the driver's names)
        gpus = self.view.get("gpus") or []
        if not gpus:
            return 100
        try:
            grant, _sock, _detached = gpuview.attach_info(cmd="python3")
        except (gpuview.NoDriver, OSError, ValueError):
            return 805
        self.gpu, self.grant = gpus[0], grant
        limits = {"GPU memory": self.gpu["memory_mib"],
                  "the driver's memory cap": self.view.get("memory_limit_mib"),
                  "the MPS server's default pinned limit": (grant.get("pinned_device_mem_limit_mib") or {}).get("0"),
                  "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": _pinned_mib(os.environ.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"))}
        self.limits = dict((k, v) for k, v in limits.items() if v is not None)
        return 0

    def _ready(self):
        return 0 if self.gpu is not None else 3

    def cuDeviceGet(self, ref, ordinal):  # noqa: N802
        if self._ready():
            return 3
        if _number(ordinal) != 0:
            return 101
        ref._obj.value = 0
        return 0

    def cuDevicePrimaryCtxRetain(self, ref, _device):  # noqa: N802
        if self._ready():
            return 3
        ref._obj.value = 1
        return 0

    def cuCtxSetCurrent(self, _context):  # noqa: N802
        return self._ready()

    def cuDeviceGetName(self, buffer, length, _device):  # noqa: N802
        if self._ready():
            return 3
        buffer.value = self.gpu["name"].encode()[:max(0, _number(length) - 1)]
        return 0

    def cuDeviceGetAttribute(self, ref, attribute, _device):  # noqa: N802
        if self._ready():
            return 3
        if _number(attribute) != MULTIPROCESSOR_COUNT:
            return 1
        ref._obj.value = gpuview.sms(self.gpu, float(self.grant["active_thread_percentage"]))
        return 0

    def cuDeviceTotalMem_v2(self, ref, _device):  # noqa: N802
        if self._ready():
            return 3
        ref._obj.value = self.gpu["memory_mib"] * MIB
        return 0

    def cuMemAlloc_v2(self, ref, size):  # noqa: N802
        if self._ready():
            return 3
        wanted = _number(size)
        if self.allocated + wanted > min(self.limits.values()) * MIB:
            return 2
        self.allocated += wanted
        ref._obj.value = self.next_pointer
        self.next_pointer += wanted
        return 0

    def cuMemFree_v2(self, _pointer):  # noqa: N802
        return self._ready()

    def cuGetErrorName(self, code, ref):  # noqa: N802
        name = RESULTS.get(_number(code))
        if name is None:
            return 1
        ref._obj.value = name.encode()
        return 0


def CDLL(name, *_args, **_kwargs):  # noqa: N802 (ctypes' name)
    """Only the NVIDIA driver, and only where the NVIDIA runtime put one."""
    if not os.path.basename(str(name)).startswith("libcuda.so"):
        raise OSError("%s: cannot open shared object file: No such file or directory (lab stand-in ctypes "
                      "opens only libcuda.so.1)" % name)
    if os.path.exists(gpuview.DEVICE):   # a container of the NVIDIA runtime
        try:
            with open(gpuview.DEVICE) as handle:
                view = json.load(handle)
        except (OSError, ValueError):
            view = {"gpus": []}
    else:
        view = _host_view()
    if view is None:
        raise OSError("%s: cannot open shared object file: No such file or directory" % name)
    return _Driver(view)
