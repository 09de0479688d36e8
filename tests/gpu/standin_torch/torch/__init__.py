# Apache-2.0
# STAND-IN for PyTorch, for dry runs of tests/gpu/run.sh without a GPU. It is
# NOT PyTorch: it answers the few calls tests/gpu/gpu_check.py's client makes,
# with the stand-in GPU's SM count capped the way MPS caps it. Like a CUDA
# client it attaches to the stand-in nvidia-cuda-mps-control (the lab's client
# protocol, lab/standin/testimage/gpuview.py): it connects to
# $CUDA_MPS_PIPE_DIRECTORY/control, sends {"client": {"requested":
# CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, "pid", "cmd", "device"}}, gets the
# percentage the server grants (at most its namespace's, or protocol 2's
# default, percentage) and stays attached until the process exits or the
# server asks it to detach.
import json
import os
import socket
import threading

_ROOT = os.environ.get("NVIDIA_STANDIN_ROOT", "")
_ATTACHED = []  # the MPS connections of this process: open until it exits


def _gpu():
    try:
        with open(_ROOT + "/etc/nvidia-standin/gpus.json") as handle:
            return json.load(handle)["gpus"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return {}


def _device_sms():
    return _gpu().get("multiprocessor_count") or 108


def _watch(sock):
    try:
        while True:
            data = sock.recv(4096)
            if not data or b'"terminate"' in data:
                break
    except OSError:
        pass
    sock.close()


def _server_percentage():
    pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY")
    if not pipe:
        return 100.0
    control = os.path.join(pipe, "control")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    try:
        sock.connect(control)
    except OSError as exc:
        raise RuntimeError("no MPS daemon for %s: %s" % (pipe, exc))
    hello = {"requested": os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100"), "pid": os.getpid(),
             "cmd": "python3", "device": _gpu().get("uuid") or ""}
    sock.sendall(json.dumps({"client": hello}).encode() + b"\n")
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    try:
        answer = json.loads(data.decode())
    except ValueError:
        raise RuntimeError("MPS: no answer from %s" % control)
    if answer.get("rc"):
        raise RuntimeError("MPS: %s%s" % (answer.get("out", ""), answer.get("err", "")))
    sock.settimeout(None)
    _ATTACHED.append(sock)
    threading.Thread(target=_watch, args=(sock,), daemon=True).start()
    return float(json.loads(answer["out"])["active_thread_percentage"])


class _Props:
    def __init__(self):
        pct = _server_percentage()   # the server's grant: the client's request can only lower it
        self.name = "NVIDIA A100-SXM4-80GB (stand-in)"
        self.multi_processor_count = int(_device_sms() * pct // 100)
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
