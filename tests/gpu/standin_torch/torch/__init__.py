# Apache-2.0
# STAND-IN for PyTorch, for dry runs of tests/gpu/run.sh without a GPU. It is
# NOT PyTorch: it answers the few calls tests/gpu/gpu_check.py's client makes,
# with the stand-in GPU's SM count capped the way MPS caps it: the client's
# CUDA_MPS_ACTIVE_THREAD_PERCENTAGE can only lower the server's (or its v3
# namespace's) percentage, read from the stand-in nvidia-cuda-mps-control.
import json
import os
import subprocess

_ROOT = os.environ.get("NVIDIA_STANDIN_ROOT", "")


def _device_sms():
    try:
        with open(_ROOT + "/etc/nvidia-standin/gpus.json") as handle:
            return json.load(handle)["gpus"][0]["multiprocessor_count"]
    except (OSError, ValueError, KeyError, IndexError):
        return 108


def _mps(pipe, args=(), line=None):
    proc = subprocess.run(["nvidia-cuda-mps-control"] + list(args), input=line, text=True,
                          capture_output=True, env=dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=pipe),
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError("MPS: %s%s" % (proc.stdout, proc.stderr))
    return proc.stdout


def _server_percentage():
    pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY")
    if not pipe:
        return 100.0
    if os.path.exists(os.path.join(pipe, "control")):
        _mps(pipe, line="start_server -uid %d\n" % os.getuid())
        return float(_mps(pipe, line="get_default_active_thread_percentage\n"))
    namespace, server_dir = os.path.basename(pipe), os.path.dirname(pipe)
    root = os.path.dirname(server_dir)
    if os.path.exists(os.path.join(root, "control")):
        rows = _mps(root, ["-p", "3", "namespace", "list", "--server=" + os.path.basename(server_dir),
                           "--format=csv,noheader"])
        for row in rows.splitlines():
            cells = [c.strip() for c in row.split(",")]
            if cells[0] == namespace:
                return float(cells[1])
    raise RuntimeError("no MPS daemon for %s" % pipe)


class _Props:
    def __init__(self):
        pct = _server_percentage()
        asked = float(os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100"))
        self.name = "NVIDIA A100-SXM4-80GB (stand-in)"
        self.multi_processor_count = int(_device_sms() * min(pct, asked) // 100)
        self.total_memory = 81920 << 20


class _Tensor:
    def __matmul__(self, other):
        return self

    def all(self):
        return self

    def item(self):
        return True


class cuda:  # noqa: N801 (mimics the module torch.cuda)
    @staticmethod
    def is_available():
        return True

    @staticmethod
    def get_device_properties(index):
        return _Props()


def randn(*shape, **kwargs):
    return _Tensor()


def isfinite(tensor):
    return tensor
