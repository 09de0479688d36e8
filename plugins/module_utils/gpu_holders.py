# -*- coding: utf-8 -*-
# Apache-2.0
"""Who still holds a node's GPUs before its driver changes.

Two views, one row shape ({kind, namespace, name, why, action, text}):
- the pods bound to the node that hold a GPU by any of the ways KAI and the
  forks mark one: the `nvidia.com/gpu` resource (or a MIG slice, or a renamed
  shared GPU), the `gpu-fraction` and
  `gpu-memory` annotations (a fractional pod requests no `nvidia.com/gpu`),
  the binder's `nvidia.com/container.<c>.gpus.devices` annotation, and KAI's
  reservation pods (bare pods in `kai-resource-reservation`);
- the node's processes with an NVIDIA device (`/dev/nvidia*`) open, read
  from /proc, each named with the pod its cgroup belongs to when it has one;
- the clients attached to the node's MPS control daemon (mps_info's
  `client list`), each named with the pod container whose namespace it uses
  (the fork's mpsd names a namespace after the container ID).

The driver stack's own processes (persistenced, Fabric Manager, the device
plugin...) hold the devices by design and are passed in as allowed names.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import re

from ansible_collections.smshare.kai.plugins.module_utils import mps

RESERVATION_NAMESPACE = "kai-resource-reservation"
FRACTION_ANNOTATIONS = ("gpu-fraction", "gpu-memory")
DEVICES_ANNOTATION = re.compile(r"^nvidia\.com/container\.[^/]+\.gpus\.devices$")
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
MIRROR = "kubernetes.io/config.mirror"
GPU_RESOURCE_NAME = re.compile(r"^nvidia\.com/(gpu|gpu\..+|mig-.+)$")
DEVICE = re.compile(r"^/dev/nvidia")
POD_CGROUP = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
DONE_PHASES = ("Succeeded", "Failed")


def _gpu_resource(name):
    """nvidia.com/gpu, a MIG slice (nvidia.com/mig-1g.10gb) or a renamed shared GPU (nvidia.com/gpu.shared)."""
    return GPU_RESOURCE_NAME.match(str(name)) is not None


def _gpu_asked(container):
    """The GPU resource names the container asks for (non-zero, in limits or requests)."""
    resources = container.get("resources") or {}
    return set(name for part in ("limits", "requests") for name, amount in (resources.get(part) or {}).items()
               if _gpu_resource(name) and str(amount).strip() not in ("", "0"))


def _requested_gpus(pod):
    spec = pod.get("spec") or {}
    names = set()
    for container in spec.get("containers") or []:
        names |= _gpu_asked(container)
    # An init container holds its GPU only while it runs (or, a sidecar, for good).
    done = set(s.get("name") for s in (pod.get("status") or {}).get("initContainerStatuses") or []
               if (s.get("state") or {}).get("terminated"))
    for container in spec.get("initContainers") or []:
        if container.get("restartPolicy") == "Always" or container.get("name") not in done:
            names |= _gpu_asked(container)
    return sorted(names)


def pod_gpu_reasons(pod):
    """Why this pod holds a GPU (empty: it holds none)."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    reasons = []
    if meta.get("namespace") == RESERVATION_NAMESPACE:
        reasons.append("KAI reservation pod")
    reasons += ["requests %s" % name for name in _requested_gpus(pod)]
    reasons += ["annotated %s" % key for key in FRACTION_ANNOTATIONS if key in annotations]
    if any(DEVICES_ANNOTATION.match(key) and annotations[key] for key in annotations):
        reasons.append("bound to a GPU by the binder (gpus.devices)")
    return reasons


def _pod_action(pod, reasons):
    meta = pod.get("metadata") or {}
    ref = "-n %s %s" % (meta.get("namespace", ""), meta.get("name", ""))
    owners = [o.get("kind") for o in meta.get("ownerReferences") or []]
    if meta.get("deletionTimestamp"):
        return ("terminating: wait for its grace period, or kubectl delete pod %s --grace-period=0 --force "
                "once its work is saved" % ref)
    if "KAI reservation pod" in reasons:
        return "the binder re-creates it where a fraction needs it: kubectl delete pod %s" % ref
    if MIRROR in (meta.get("annotations") or {}):
        return "a static pod: remove its manifest from the kubelet's staticPodPath on the node"
    if "DaemonSet" in owners:
        return ("the drain leaves DaemonSet pods: keep the DaemonSet off nodes being upgraded (a nodeAffinity on "
                "the upgrade-state label) or delete the pod (kubectl delete pod %s)" % ref)
    if not owners:
        return ("a bare pod: the drain cannot evict it without driver_upgrade_drain_force; wait for it to finish "
                "or delete it (kubectl delete pod %s)" % ref)
    return ("not evicted (outside driver_upgrade_drain_pod_selectors, or driver_upgrade_drain is false): "
            "evict or delete it (kubectl delete pod %s)" % ref)


def running_on(pods, node_name):
    """The pods bound to node_name that have not finished."""
    for pod in pods or []:
        if (pod.get("spec") or {}).get("nodeName") == node_name and \
                (pod.get("status") or {}).get("phase") not in DONE_PHASES:
            yield pod


def holding_pods(pods, node_name):
    """Rows for the pods bound to node_name, not finished, that hold a GPU."""
    rows = []
    for pod in running_on(pods, node_name):
        meta = pod.get("metadata") or {}
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
        except OSError as exc:   # gone meanwhile (not counted), or not ours to read (not root)
            unreadable += int(exc.errno in (errno.EACCES, errno.EPERM))
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
        comm = _read(os.path.join(proc_root, entry, "comm")).strip()
        if not comm:   # exited while it was read: it holds nothing now
            continue
        pod = POD_CGROUP.search(_read(os.path.join(proc_root, entry, "cgroup")))
        found.append({"pid": int(entry), "comm": comm,
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
               "action": ("delete its pod, or let it finish" if process.get("pod_uid") else
                          "stop it (its service or job) before the driver changes; if it belongs to the driver "
                          "stack, add %r to driver_upgrade_holders_allowed_processes" % process["comm"])}
        row["text"] = "%s %s: %s" % (row["name"], row["why"], row["action"])
        rows.append(row)
    return rows


def _namespace_owners(pods):
    """{fork namespace name: 'namespace/pod (container c)'} for the pods' containers."""
    owners = {}
    for pod in pods or []:
        meta = pod.get("metadata") or {}
        status = pod.get("status") or {}
        for entry in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
            found = str(entry.get("containerID") or "").split("://", 1)[-1]
            if found.strip():
                owners[mps.fork_namespace_name(found)] = "%s/%s (container %s)" % (
                    meta.get("namespace", ""), meta.get("name", ""), entry.get("name", ""))
    return owners


def mps_client_rows(clients, pods=None):
    """Rows for the clients attached to the node's MPS control daemon: mps_info's
    state.clients (v3: pid, server, device, namespace, command; legacy: pid and
    server_pid), named with the pod whose container's namespace they use."""
    owners = _namespace_owners(pods)
    rows = []
    for client in clients or []:
        pid = client.get("pid")
        command = client.get("command") or ""
        where = ("namespace %s of server %s" % (client.get("namespace"), client.get("server"))
                 if client.get("namespace") else
                 "server pid %s" % client.get("server_pid") if client.get("server_pid") else "the MPS daemon")
        pod = owners.get(client.get("namespace") or "")
        detach = ("echo terminate_client %s %s | nvidia-cuda-mps-control" % (client["server_pid"], pid)
                  if client.get("server_pid") else "nvidia-cuda-mps-control -p 3 client terminate %s" % pid)
        row = {"kind": "mps_client", "namespace": "",
               "name": "MPS client pid %s%s" % (pid, " (%s)" % command if command else ""),
               "why": "attached to %s%s" % (where, ", in pod " + pod if pod else ""),
               "action": ("delete its pod, or let it finish" if pod else
                          "end it, or detach it (%s): the daemon goes with the fractioning agents, which "
                          "leave a node being upgraded" % detach)}
        row["text"] = "%s %s: %s" % (row["name"], row["why"], row["action"])
        rows.append(row)
    return rows
