# -*- coding: utf-8 -*-
# Apache-2.0
"""The greedy-neighbour probe: a small CUDA client without CUDA's toolkit.

It calls the CUDA driver API (libcuda.so.1, which the NVIDIA container runtime
mounts into a GPU container) through ctypes, so any image with python3 runs it:
`python3 -c <this file's text> --role greedy|neighbour [--cap-mib N] [--hold S]`.
The smoke test (smoke_checks.py, fraction_smoke_test's greedy_neighbour) runs
it in two half-GPU pods on one GPU; tests/gpu/gpu_check.py runs it on a host.
Standard library only, and nothing of Ansible: it runs alone.

A greedy client does what a pod can do to itself to take more than its share:
before the driver starts it sets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100 and
removes CUDA_MPS_PINNED_DEVICE_MEM_LIMIT from its own environment (the
variables fractiond injected); it then allocates WITHIN (4/5 of its cap, which
must succeed: else the probe proves nothing), keeps it, tries BEYOND (its cap
plus an eighth) in one allocation, keeps whatever it got, prints its result and
holds it all for --hold seconds (or until it is killed), so that a neighbour
can be measured beside it. A neighbour keeps its environment, allocates
WITHIN and prints. The cap is what the pod was given (NVIDIA_GPU_MEMORY_LIMIT,
either spelling, else CUDA_MPS_PINNED_DEVICE_MEM_LIMIT's first device), read
before the greedy one drops it, or --cap-mib.

Output: one line `SMSHARE_GPU_PROBE {json}` (role, asked, cap_mib, cap_from,
device, multiprocessors, total_memory_mib, allocations [{what, mib, ok,
result, code}], held_mib, error); exit 0 when the probe ran, 1 when it could
not (the line then says why in `error`).

Driver API used (CUDA driver API reference; error codes as cuda-python's
driver.Result lists them: 0 success, 2 out of memory): cuInit, cuDeviceGet,
cuDevicePrimaryCtxRetain, cuCtxSetCurrent, cuDeviceGetName,
cuDeviceGetAttribute (16: multiprocessor count), cuDeviceTotalMem_v2,
cuMemAlloc_v2, cuGetErrorName. The SM count a client sees under MPS is the
share its server grants it (the guide's deviceQuery measurement); that the
driver attribute shows the same number as deviceQuery's runtime call is
unverified until tests/gpu/run.sh runs on a GPU (it compares them).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import sys
import time

MARKER = "SMSHARE_GPU_PROBE"
LIBRARY = "libcuda.so.1"
CUDA_SUCCESS = 0
CUDA_ERROR_OUT_OF_MEMORY = 2
ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
MIB = 1 << 20
PERCENTAGE = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
PINNED = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
CAP_VARIABLES = ("NVIDIA_GPU_MEMORY_LIMIT", "NVIDIA_GPU_MEMORY_LIMITS")
GREEDY_PERCENTAGE = "100"
ROLES = ("greedy", "neighbour")
SIZE_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)I?B?", re.I)
SIZE_MIB = {"": None, "K": 1.0 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


class ProbeError(Exception):
    pass


def size_mib(text):
    """`40448M`, `40G`, `512MB` in MiB (int), else None (a bare number's unit is unknown)."""
    match = SIZE_RE.fullmatch((text or "").strip())
    if not match or SIZE_MIB[match.group(2).upper()] is None:
        return None
    return int(float(match.group(1)) * SIZE_MIB[match.group(2).upper()])


def pinned_mib(text, device="0"):
    """A CUDA_MPS_PINNED_DEVICE_MEM_LIMIT value (`0=40448M,1=40448M`): device 0's limit in MiB, or None."""
    for entry in (text or "").split(","):
        key, sep, value = entry.partition("=")
        if sep and key.strip() == device:
            return size_mib(value)
    return None


def cap_from(env):
    """(the pod's memory cap in MiB, the variable it was read from), or (None, None)."""
    for name in CAP_VARIABLES:
        value = (env.get(name) or "").strip()
        if value.isdigit():
            return int(value), name
    limit = pinned_mib(env.get(PINNED))
    if limit is not None:
        return limit, PINNED
    return None, None


def sizes(cap_mib):
    """{within, beyond} in MiB for a cap: 4/5 of it, and the cap plus an eighth (at least 256 MiB more)."""
    return {"within": int(cap_mib * 4 // 5), "beyond": int(cap_mib + max(256, cap_mib // 8))}


def prepare(role, env):
    """What the role asks for, applied to `env` (the process's own environment, before
    the driver reads it): {variable: the value set, or None when removed}."""
    if role != "greedy":
        return {}
    env[PERCENTAGE] = GREEDY_PERCENTAGE
    env.pop(PINNED, None)
    return {PERCENTAGE: GREEDY_PERCENTAGE, PINNED: None}


def error_name(ct, lib, code):
    text = ct.c_char_p()
    try:
        if lib.cuGetErrorName(code, ct.byref(text)) == CUDA_SUCCESS and text.value:
            return text.value.decode("ascii", "replace")
    except (AttributeError, TypeError, ValueError):
        pass
    return "CUresult %d" % code


def new_result(role, asked, cap_mib, cap_source):
    return {"role": role, "asked": asked, "cap_mib": cap_mib, "cap_from": cap_source, "device": None,
            "multiprocessors": None, "total_memory_mib": None, "allocations": [], "held_mib": 0, "error": None}


def run(ct, lib, result, held):
    """The probe on a loaded driver library, filling `result` as it goes (what it read stays
    there when a later call fails) and `held` with what must stay alive while it holds."""
    role, cap_mib = result["role"], result["cap_mib"]

    def call(name, *args):
        code = getattr(lib, name)(*args)
        if code != CUDA_SUCCESS:
            raise ProbeError("%s: %s (%d)" % (name, error_name(ct, lib, code), code))

    call("cuInit", 0)
    device = ct.c_int()
    call("cuDeviceGet", ct.byref(device), 0)
    context = ct.c_void_p()
    call("cuDevicePrimaryCtxRetain", ct.byref(context), device)
    call("cuCtxSetCurrent", context)
    held.append(context)
    name = ct.create_string_buffer(256)
    call("cuDeviceGetName", name, 256, device)
    result["device"] = name.value.decode("utf-8", "replace")
    sms = ct.c_int()
    call("cuDeviceGetAttribute", ct.byref(sms), ATTRIBUTE_MULTIPROCESSOR_COUNT, device)
    result["multiprocessors"] = sms.value
    total = ct.c_size_t()
    call("cuDeviceTotalMem_v2", ct.byref(total), device)
    result["total_memory_mib"] = int(total.value // MIB)
    if cap_mib is None:
        raise ProbeError("no GPU memory cap in the environment (%s, %s): nothing to hold the pod to"
                         % (" or ".join(CAP_VARIABLES), PINNED))
    wanted = sizes(cap_mib)
    for what in (("within", "beyond") if role == "greedy" else ("within",)):
        pointer = ct.c_uint64()
        code = lib.cuMemAlloc_v2(ct.byref(pointer), ct.c_size_t(wanted[what] * MIB))
        result["allocations"].append({"what": what, "mib": wanted[what], "ok": code == CUDA_SUCCESS,
                                      "code": code, "result": error_name(ct, lib, code)})
        if code == CUDA_SUCCESS:
            held.append(pointer)   # kept: freed when the process ends
            result["held_mib"] += wanted[what]
    return result


def line(result):
    return "%s %s\n" % (MARKER, json.dumps(result, sort_keys=True))


def parse(text):
    """The last result line in a probe's output (a pod log, an exec's stdout): its dict, or None."""
    found = None
    for row in (text or "").splitlines():
        row = row.strip()
        if row.startswith(MARKER + " "):
            try:
                value = json.loads(row[len(MARKER) + 1:])
            except ValueError:
                continue
            if isinstance(value, dict):
                found = value
    return found


def arguments(argv):
    options = {"role": None, "cap_mib": None, "hold": 0.0}
    args = list(argv)
    while args:
        key = args.pop(0)
        if key not in ("--role", "--cap-mib", "--hold") or not args:
            raise ProbeError("usage: --role greedy|neighbour [--cap-mib MIB] [--hold SECONDS] (got %r)" % key)
        value = args.pop(0)
        try:
            if key == "--role" and value in ROLES:
                options["role"] = value
            elif key == "--cap-mib":
                options["cap_mib"] = int(value)
            elif key == "--hold":
                options["hold"] = float(value)
            else:
                raise ValueError(value)
        except ValueError:
            raise ProbeError("%s %r: not a valid value" % (key, value))
    if options["role"] is None:
        raise ProbeError("usage: --role greedy|neighbour [--cap-mib MIB] [--hold SECONDS]")
    return options


def main(argv, env=None, out=None, load=None):
    """The command line (env, out and load are for tests: the environment, the output
    stream and a function returning (ctypes module, library))."""
    env = os.environ if env is None else env
    out = sys.stdout if out is None else out
    try:
        options = arguments(argv)
    except ProbeError as exc:
        out.write(line({"error": str(exc)}))
        return 2
    cap_mib, cap_source = cap_from(env)
    if options["cap_mib"] is not None:
        cap_mib, cap_source = options["cap_mib"], "--cap-mib"
    asked = prepare(options["role"], env)
    result, held = new_result(options["role"], asked, cap_mib, cap_source), []
    try:
        ct, lib = (load or _load)()
        run(ct, lib, result, held)
    except (ProbeError, OSError, ImportError, AttributeError) as exc:
        result["error"] = str(exc)
        out.write(line(result))
        out.flush()
        return 1
    out.write(line(result))
    out.flush()
    deadline = time.time() + options["hold"]
    while time.time() < deadline:   # holding what it got, beside its neighbour
        time.sleep(min(1.0, max(0.0, deadline - time.time())))
    del held
    return 0


def _load():
    try:
        import ctypes
    except ImportError as exc:
        raise ProbeError("python3 has no ctypes (%s): use an image whose python3 has it" % exc)
    try:
        return ctypes, ctypes.CDLL(LIBRARY)
    except OSError as exc:
        raise ProbeError("cannot load %s (%s): is the pod run by the NVIDIA runtime (runtimeClassName nvidia), "
                         "with NVIDIA_DRIVER_CAPABILITIES including compute?" % (LIBRARY, exc))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
