# STAND-IN (lab only): what a CUDA client in a container of the lab sees, shared
# by the test image's nvidia-smi and deviceQuery. The driver's view comes from
# /run/nvidia-standin/device.json (read-only, written at container creation by
# the runtime wrapper, lab/standin/runtime/fractiond-inject): the visible GPUs
# and the memory cap. The SM share comes from the MPS server, through the lab's
# client protocol of the stand-in nvidia-cuda-mps-control (lab/standin/bin):
#   connect to $CUDA_MPS_PIPE_DIRECTORY/control (a namespace's socket,
#   <pipe>/<server>/<namespace>/control, or the daemon's root socket), send one
#   JSON line {"client": {"requested": CUDA_MPS_ACTIVE_THREAD_PERCENTAGE or "100",
#   "pid": ..., "cmd": ..., "device": <GPU UUID or "">}}, read one JSON line
#   {"rc": 0, "out": "{\"active_thread_percentage\": X}\n", "err": ""}: X is at
#   most the namespace's cap, whatever the client asked. The client then STAYS
#   ATTACHED (it shows in `client list`, its namespace cannot be set or deleted)
#   until it closes the connection: at process exit, or when the server sends
#   {"terminate": true} (`client terminate PID`). Nothing here trusts the
#   client's own request.
# Lab helper to hold a client attached (tests of busy namespaces, client list,
# client terminate):
#   python3 gpuview.py hold SECONDS
# attaches (cmd "gpuview"), prints one JSON line {"pid": ..., "active_thread_percentage": X}
# and stays attached until SECONDS passed or the server asked it to detach; rc 0
# (rc 1 with the reason on stderr when it could not attach). In Python:
# attach() returns (X, socket) and the socket stays open until closed.
import json
import os
import socket
import sys
import threading
import time

DEVICE = "/run/nvidia-standin/device.json"
_ATTACHED = []  # this process's attachments: open until the process exits


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


def _device_uuid():
    try:
        return device()["gpus"][0].get("uuid") or ""
    except (NoDriver, KeyError, IndexError, AttributeError):
        return ""


def _watch(sock, detached):
    """Closes the connection when the server asks the client to detach (or is gone)."""
    try:
        while True:
            data = sock.recv(4096)
            if not data or b'"terminate"' in data:
                break
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
    detached.set()


def attach(cmd=None):
    """Attach to the MPS server named by CUDA_MPS_PIPE_DIRECTORY: (the
    percentage it grants, the open socket, an Event set once detached).
    Without CUDA_MPS_PIPE_DIRECTORY: (100.0, None, None)."""
    grant, sock, detached = attach_info(cmd)
    return float(grant["active_thread_percentage"]), sock, detached


def attach_info(cmd=None):
    """attach(), with the server's whole grant: {active_thread_percentage, and
    pinned_device_mem_limit_mib ({"0": MiB}) when the server has default pinned
    device memory limits}. Without CUDA_MPS_PIPE_DIRECTORY: ({100.0}, None, None)."""
    pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY")
    requested = os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100")
    if not pipe:
        return {"active_thread_percentage": 100.0}, None, None
    control = os.path.join(pipe, "control")
    if not os.path.exists(control):
        raise NoDriver("MPS server not reachable at %s" % control)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(control)
    hello = {"requested": requested, "pid": os.getpid(), "device": _device_uuid(),
             "cmd": cmd or os.path.basename(sys.argv[0] if sys.argv and sys.argv[0] else "python3")}
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
        sock.close()
        raise NoDriver("MPS server at %s gave no answer" % control)
    if answer.get("rc"):
        sock.close()
        raise NoDriver("MPS server refused the client: %s" % answer.get("err", "").strip())
    sock.settimeout(None)
    detached = threading.Event()
    threading.Thread(target=_watch, args=(sock, detached), daemon=True).start()
    _ATTACHED.append(sock)
    return json.loads(answer["out"]), sock, detached


def mps_percentage():
    """The active thread percentage the MPS server grants this client (100
    without MPS); the client stays attached until this process exits."""
    return attach()[0]


def sms(gpu, percentage):
    return max(1, int(gpu["sm_count"] * percentage / 100.0 + 1e-6))   # floor: positive


def hold(seconds):
    try:
        percentage, _gpu, detached = attach(cmd="gpuview")
    except (NoDriver, OSError) as exc:
        sys.stderr.write("%s\n" % exc)
        return 1
    print(json.dumps({"pid": os.getpid(), "active_thread_percentage": percentage}), flush=True)
    if detached is None:
        time.sleep(seconds)
    else:
        detached.wait(seconds)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "hold":
        sys.exit(hold(float(sys.argv[2])))
    sys.stderr.write("usage: gpuview.py hold SECONDS\n")
    sys.exit(2)
