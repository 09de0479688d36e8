# -*- coding: utf-8 -*-
# Apache-2.0
"""Who still holds a node's GPUs before its driver changes.

Two views, one row shape ({kind, namespace, name, why, action, text}):
- the pods bound to the node that hold a GPU by any of the ways KAI and the
  forks mark one: the `nvidia.com/gpu` resource, the `gpu-fraction` and
  `gpu-memory` annotations (a fractional pod requests no `nvidia.com/gpu`),
  the binder's `nvidia.com/container.<c>.gpus.devices` annotation, and KAI's
  reservation pods (bare pods in `kai-resource-reservation`);
- the node's processes with an NVIDIA device (`/dev/nvidia*`) open, read
  from /proc, each named with the pod its cgroup belongs to when it has one.

The driver stack's own processes (persistenced, Fabric Manager, the device
plugin...) hold the devices by design and are passed in as allowed names.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

GPU_RESOURCE = "nvidia.com/gpu"
RESERVATION_NAMESPACE = "kai-resource-reservation"
FRACTION_ANNOTATIONS = ("gpu-fraction", "gpu-memory")
DEVICES_ANNOTATION = re.compile(r"^nvidia\.com/container\.[^/]+\.gpus\.devices$")
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
DEVICE = re.compile(r"^/dev/nvidia")
POD_CGROUP = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
DONE_PHASES = ("Succeeded", "Failed")


def _requests_gpu(pod):
    spec = pod.get("spec") or {}
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        resources = container.get("resources") or {}
        for part in ("limits", "requests"):
            amount = str((resources.get(part) or {}).get(GPU_RESOURCE, "0")).strip()
            if amount not in ("", "0"):
                return True
    return False


def pod_gpu_reasons(pod):
    """Why this pod holds a GPU (empty: it holds none)."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    reasons = []
    if meta.get("namespace") == RESERVATION_NAMESPACE:
        reasons.append("KAI reservation pod")
    if _requests_gpu(pod):
        reasons.append("requests %s" % GPU_RESOURCE)
    reasons += ["annotated %s" % key for key in FRACTION_ANNOTATIONS if key in annotations]
    if any(DEVICES_ANNOTATION.match(key) and annotations[key] for key in annotations):
        reasons.append("bound to a GPU by the binder (gpus.devices)")
    return reasons


def _pod_action(pod, reasons):
    meta = pod.get("metadata") or {}
    ref = "-n %s %s" % (meta.get("namespace", ""), meta.get("name", ""))
    if meta.get("deletionTimestamp"):
        return ("terminating: wait for its grace period, or kubectl delete pod %s --grace-period=0 --force "
                "once its work is saved" % ref)
    if "KAI reservation pod" in reasons:
        return "the binder re-creates it where a fraction needs it: kubectl delete pod %s" % ref
    if not meta.get("ownerReferences"):
        return ("a bare pod: the drain cannot evict it without driver_upgrade_drain_force; wait for it to finish "
                "or delete it (kubectl delete pod %s)" % ref)
    return "evicted but still running: check its PodDisruptionBudget and grace period (kubectl describe pod %s)" % ref


def holding_pods(pods, node_name):
    """Rows for the pods bound to node_name, not finished, that hold a GPU."""
    rows = []
    for pod in pods or []:
        meta = pod.get("metadata") or {}
        if (pod.get("spec") or {}).get("nodeName") != node_name:
            continue
        if (pod.get("status") or {}).get("phase") in DONE_PHASES:
            continue
        reasons = pod_gpu_reasons(pod)
        if not reasons:
            continue
        annotations = meta.get("annotations") or {}
        if str(annotations.get(DO_NOT_DISRUPT, "")).lower() == "true":
            reasons = reasons + ["annotated %s" % DO_NOT_DISRUPT]
        row = {"kind": "pod", "namespace": meta.get("namespace", ""), "name": meta.get("name", ""),
               "uid": meta.get("uid", ""), "why": ", ".join(reasons), "action": _pod_action(pod, reasons)}
        row["text"] = "pod %s/%s (%s): %s" % (row["namespace"], row["name"], row["why"], row["action"])
        rows.append(row)
    return sorted(rows, key=lambda r: (r["namespace"], r["name"]))


def _read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def open_devices(proc_root="/proc"):
    """([{pid, comm, cmdline, devices, pod_uid}], unreadable): every process with
    /dev/nvidia* open, and how many processes' open files could not be read."""
    found = []
    unreadable = 0
    for entry in os.listdir(proc_root):
        if not entry.isdigit():
            continue
        fd_dir = os.path.join(proc_root, entry, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:   # gone meanwhile, or not ours to read (not root)
            unreadable += int(os.path.isdir(os.path.join(proc_root, entry)))
            continue
        devices = set()
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if DEVICE.match(target):
                devices.add(target)
        if not devices:
            continue
        pod = POD_CGROUP.search(_read(os.path.join(proc_root, entry, "cgroup")))
        found.append({"pid": int(entry), "comm": _read(os.path.join(proc_root, entry, "comm")).strip(),
                      "cmdline": _read(os.path.join(proc_root, entry, "cmdline")).replace("\0", " ").strip(),
                      "devices": sorted(devices), "pod_uid": pod.group(1).replace("_", "-") if pod else ""})
    return sorted(found, key=lambda p: p["pid"]), unreadable


def holding_processes(processes, allowed, pods=None):
    """Rows for the processes not in `allowed` (names as /proc/<pid>/comm gives them)."""
    by_uid = {}
    for pod in pods or []:
        meta = pod.get("metadata") or {}
        if meta.get("uid"):
            by_uid[meta["uid"]] = "%s/%s" % (meta.get("namespace", ""), meta.get("name", ""))
    rows = []
    for process in processes or []:
        if process["comm"] in allowed:
            continue
        where = by_uid.get(process.get("pod_uid") or "", "")
        if process.get("pod_uid") and not where:
            where = "pod uid " + process["pod_uid"]
        row = {"kind": "process", "namespace": "", "name": "pid %d (%s)" % (process["pid"], process["comm"]),
               "why": "has %s open%s" % (", ".join(process["devices"]), " in " + where if where else ""),
               "action": ("stop it (its pod, service or job) before the driver changes; if it belongs to the "
                          "driver stack, add %r to driver_upgrade_holders_allowed_processes" % process["comm"])}
        row["text"] = "%s %s: %s" % (row["name"], row["why"], row["action"])
        rows.append(row)
    return rows
