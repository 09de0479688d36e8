# STAND-IN (lab only): what a CUDA client in a container of the lab sees, shared
# by the test image's nvidia-smi and deviceQuery. The driver's view comes from
# /run/nvidia-standin/device.json (read-only, written at container creation by
# the runtime wrapper, lab/standin/runtime/fractiond-inject): the visible GPUs
# and the memory cap. The SM share comes from the MPS server: a client of the
# namespace named by CUDA_MPS_PIPE_DIRECTORY (<pipe>/<server>/<namespace>) asks
# the server, whose control socket is <pipe>/control, for the percentage it
# requests (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, default 100); the server grants
# at most the namespace's cap. Nothing here trusts the client's own request.
import json
import os
import socket

DEVICE = "/run/nvidia-standin/device.json"


class NoDriver(Exception):
    pass


def device():
    try:
        with open(DEVICE) as handle:
            found = json.load(handle)
    except (OSError, ValueError):
        raise NoDriver("no NVIDIA driver in this container (not started with the nvidia runtime)")
    if not found.get("gpus"):
        raise NoDriver("no CUDA-capable device is detected")
    return found


def mps_percentage():
    """The active thread percentage the MPS server grants this client (100 without MPS)."""
    pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY")
    requested = os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100")
    if not pipe:
        return 100.0
    namespace, server, root = os.path.basename(pipe), os.path.basename(os.path.dirname(pipe)), \
        os.path.dirname(os.path.dirname(pipe))
    control = os.path.join(root, "control")
    if not os.path.exists(control):
        raise NoDriver("MPS server not reachable at %s" % control)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(control)
    sock.sendall(json.dumps({"client": {"server": server, "namespace": namespace,
                                        "requested": requested}}).encode() + b"\n")
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    sock.close()
    answer = json.loads(data.decode())
    if answer.get("rc"):
        raise NoDriver("MPS server refused the client: %s" % answer.get("err", "").strip())
    return float(json.loads(answer["out"])["active_thread_percentage"])


def sms(gpu, percentage):
    return max(1, int(gpu["sm_count"] * percentage / 100.0 + 1e-6))   # floor: positive
