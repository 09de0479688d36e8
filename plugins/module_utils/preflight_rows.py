# -*- coding: utf-8 -*-
# Apache-2.0
"""Rows of the guide's "Cluster and Nodes" table that the preflight role checks
in Python (pure functions of API objects and module results, unit-tested alone;
filters: plugins/filter/preflight_rows.py). Every function returns rows in the
preflight role's shape: {check, found, wanted, status (PASS, FAIL, PENDING), fix}.

Sources: the guide's table (rows 1, 4, 5, 7, 8 and "Adjust for your
environment"); the fork's mpsd pod limit (gpu-fractioning
operator/internal/fractioningmanager/components/mpsd/mpsd.go @ db0ba2ec:
requests 50m/128Mi, limit 1Gi, "1Gi covers a 16-GPU node"); the binder's
event (guide, Troubleshooting row 10)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.smshare.kai.plugins.module_utils import mps as _mps

PASS, FAIL, PENDING = "PASS", "FAIL", "PENDING"

GPU_RESOURCE = "nvidia.com/gpu"
PRESENT_SELECTOR = "nvidia.com/gpu.present=true"
MEMORY_LABEL = "nvidia.com/gpu.memory"
COUNT_LABEL = "nvidia.com/gpu.count"
# GPU Feature Discovery's labels: a node that carries one has GPUs.
GFD_LABELS = ("nvidia.com/gpu.count", "nvidia.com/gpu.product", "nvidia.com/gpu.memory")
# A GPU of this guide has tens of thousands of MiB; a value below this is not MiB.
MIN_GPU_MEMORY_MIB = 1024

# mpsd's host memory (guide row 8): about 50 MiB per GPU; the fork's default
# pod limit is 1Gi ("1Gi covers a 16-GPU node"), i.e. 64 MiB per GPU, the
# ratio the role uses when it raises the limit for denser nodes.
MPSD_MIB_PER_GPU = 50
MPSD_DEFAULT_LIMIT = "1Gi"
MPSD_DEFAULT_LIMIT_MIB = 1024
MPSD_AUTO_MIB_PER_GPU = 64

# k3s and RKE2 keep containerd's socket here (the guide's "Adjust" row).
K3S_CRI_SOCKET = "/run/k3s/containerd/containerd.sock"

QUANTITY_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?")
QUANTITY_FACTORS = {None: 1, "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50,
                    "Ei": 2 ** 60, "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12, "P": 10 ** 15,
                    "E": 10 ** 18}


def row(check, found, wanted, status, fix=""):
    return {"check": check, "found": found, "wanted": wanted, "status": status, "fix": fix}


# ---------------------------------------------------------------- objects
def quantity_bytes(text):
    """A Kubernetes quantity ("1Gi", "256Mi", "1073741824", "1.5G") in bytes; ValueError otherwise."""
    match = QUANTITY_RE.fullmatch(str(text).strip()) if text is not None else None
    if not match:
        raise ValueError("%r is not a Kubernetes quantity such as 1Gi or 512Mi" % (text,))
    return int(float(match.group(1)) * QUANTITY_FACTORS[match.group(2)])


def mib_text(mib):
    """512 -> '512Mi', 2048 -> '2Gi'."""
    return "%dGi" % (mib // 1024) if mib % 1024 == 0 else "%dMi" % mib


def parse_selector(selector):
    """'a=b,c=d' (equality only) -> {'a': 'b', 'c': 'd'}; ValueError for other forms."""
    labels = {}
    for part in (selector or "").split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep or key.endswith("!") or "=" in value:
            raise ValueError("%r is not a key=value label selector" % selector)
        labels[key.strip()] = value.strip()
    return labels


def _name(node):
    return (node.get("metadata") or {}).get("name") or "?"


def _labels(node):
    return (node.get("metadata") or {}).get("labels") or {}


def _whole(value):
    try:
        return int(float(str(value)))
    except (TypeError, ValueError):
        return 0


def gpu_count(node):
    """The node's GPUs: GFD's nvidia.com/gpu.count, else allocatable, else capacity nvidia.com/gpu."""
    count = _whole(_labels(node).get(COUNT_LABEL))
    if count:
        return count
    status = node.get("status") or {}
    for key in ("allocatable", "capacity"):
        count = _whole((status.get(key) or {}).get(GPU_RESOURCE))
        if count:
            return count
    return 0


def matches(node, selector):
    labels = _labels(node)
    return all(labels.get(k) == v for k, v in parse_selector(selector).items())


def has_gpus(node):
    """Evidence of GPUs whatever the node's labels for the daemons: GFD's labels or nvidia.com/gpu."""
    labels = _labels(node)
    return gpu_count(node) > 0 or any(key in labels for key in GFD_LABELS)


def gpu_nodes(nodes, selector=PRESENT_SELECTOR):
    """The GPU nodes: those the selector picks and those with GPUs, in input order."""
    return [n for n in nodes or [] if matches(n, selector) or has_gpus(n)]


def _join(items, limit=8):
    items = list(items)
    return ", ".join(items[:limit]) + (" and %d more" % (len(items) - limit) if len(items) > limit else "")


# ---------------------------------------------------------------- rows 4 and 5
def gpu_present_rows(nodes, selector=PRESENT_SELECTOR):
    """Guide row 4: every GPU node carries the label the mpsd and fractiond
    DaemonSets select on. A node without it gets no daemons and reports no error.
    No row when the cluster shows no GPU node at all (the 'GPU nodes' row names that)."""
    found = gpu_nodes(nodes, selector)
    if not found:
        return []
    missing = [n for n in found if not matches(n, selector)]
    label = "label " + selector
    if not missing:
        return [row(label, "on all %d GPU node%s" % (len(found), "s" if len(found) > 1 else ""),
                    "every GPU node", PASS)]
    described = ["%s (%d %s)" % (_name(n), gpu_count(n), GPU_RESOURCE) if gpu_count(n) else _name(n)
                 for n in missing]
    return [row(label, "missing on " + _join(described), "every GPU node", FAIL,
                "label %s (kubectl label node NODE %s; the GPU Operator sets it): the mpsd and fractiond "
                "DaemonSets select GPU nodes by it, and a node without it gets no daemons and reports no error"
                % (_join(_name(n) for n in missing), selector))]


def gpu_memory_rows(nodes, selector=PRESENT_SELECTOR):
    """Guide row 5: nvidia.com/gpu.memory, a whole number of MiB, on every GPU node
    (KAI's binder computes a fractional pod's memory cap from it)."""
    found = gpu_nodes(nodes, selector)
    if not found:
        return []
    bad = []
    for node in found:
        value = _labels(node).get(MEMORY_LABEL)
        if value is None or str(value).strip() == "":
            bad.append("%s: missing" % _name(node))
        elif not re.fullmatch(r"[0-9]+", str(value).strip()):
            bad.append("%s: %r is not a whole number of MiB" % (_name(node), value))
        elif int(value) < MIN_GPU_MEMORY_MIB:
            bad.append("%s: %s is too small for MiB" % (_name(node), value))
    check = "label %s (MiB)" % MEMORY_LABEL
    if not bad:
        values = sorted(set(str(_labels(n)[MEMORY_LABEL]).strip() for n in found))
        return [row(check, ", ".join(values) + " on all %d GPU node%s" % (len(found), "s" if len(found) > 1 else ""),
                    "a value in MiB on every GPU node", PASS)]
    return [row(check, "; ".join(bad[:8]) + (" and %d more" % (len(bad) - 8) if len(bad) > 8 else ""),
                "a value in MiB on every GPU node", FAIL,
                "run GPU Feature Discovery (part of the GPU Operator), which sets %s on every GPU node "
                "(kubectl get nodes -L %s): without it KAI's binder cannot compute a fractional pod's memory "
                "cap, and fractional pods stay Pending with only a binder event (BindingError ... failed to set "
                "NvFractions memory annotation: node does not include %s label)"
                % (MEMORY_LABEL, MEMORY_LABEL, MEMORY_LABEL))]


# ---------------------------------------------------------------- row 8
def mpsd_memory_limit(nodes, selector=PRESENT_SELECTOR, limit=None):
    """mpsd's pod memory limit for these nodes. Given: that value. Unset: None (the
    chart's default, 1Gi) unless the largest GPU node needs more, then 64Mi per GPU
    (1Gi/16 GPUs, the fork's ratio). Returns {limit (quantity or None), limit_mib,
    auto, gpus (the largest count), node (its name), required_mib (50 MiB per GPU)}."""
    biggest = None
    for node in gpu_nodes(nodes, selector):
        if biggest is None or gpu_count(node) > gpu_count(biggest):
            biggest = node
    gpus = gpu_count(biggest) if biggest is not None else 0
    plan = {"gpus": gpus, "node": _name(biggest) if biggest is not None else None,
            "required_mib": MPSD_MIB_PER_GPU * gpus, "auto": False}
    if limit is not None and str(limit).strip() != "":
        plan.update(limit=str(limit).strip(), limit_mib=quantity_bytes(limit) // 2 ** 20)
        return plan
    auto_mib = MPSD_AUTO_MIB_PER_GPU * gpus
    if auto_mib > MPSD_DEFAULT_LIMIT_MIB:
        plan.update(limit=mib_text(auto_mib), limit_mib=auto_mib, auto=True)
    else:
        plan.update(limit=None, limit_mib=MPSD_DEFAULT_LIMIT_MIB)
    return plan


def mpsd_memory_rows(nodes, selector=PRESENT_SELECTOR, limit=None, knob="smshare_mpsd_memory_limit"):
    """Guide row 8: mpsd holds one CUDA server context per GPU, about 50 MiB of
    host memory each; its pod's memory limit must cover the largest GPU node."""
    try:
        plan = mpsd_memory_limit(nodes, selector, limit)
    except ValueError as exc:
        return [row("mpsd memory limit", "%s: %s" % (knob, exc), "a quantity such as 1Gi", FAIL,
                    "set %s to a Kubernetes quantity (the chart's mpsDaemon.resources.limits.memory), e.g. 2Gi"
                    % knob)]
    if not plan["gpus"]:
        return []
    wanted = ">= %s (%d MiB x %d GPUs on %s)" % (
        mib_text(plan["required_mib"]), MPSD_MIB_PER_GPU, plan["gpus"], plan["node"])
    suggestion = mib_text(MPSD_AUTO_MIB_PER_GPU * plan["gpus"])
    if plan["limit"] is None:
        found = "%s (the chart's default)" % MPSD_DEFAULT_LIMIT
    elif plan["auto"]:
        found = "%s (raised by the gpu_fractioning role from %s: 64Mi per GPU)" % (plan["limit"], MPSD_DEFAULT_LIMIT)
    else:
        found = "%s (%s)" % (plan["limit"], knob)
    if plan["limit_mib"] >= plan["required_mib"]:
        return [row("mpsd memory limit", found, wanted, PASS)]
    return [row("mpsd memory limit", found, wanted, FAIL,
                "node %s has %d GPUs: mpsd needs about %d MiB of host memory per GPU, so %s is too small (mpsd "
                "exits with CUDA_ERROR_OUT_OF_MEMORY while the GPUs sit idle): set %s to %s or more (the chart's "
                "mpsDaemon.resources.limits.memory), or leave it unset and the role sizes it"
                % (plan["node"], plan["gpus"], MPSD_MIB_PER_GPU, plan["limit"], knob, suggestion))]


# ---------------------------------------------------------------- row 1: MPS v3
V3_CHECK = "MPS v3 (namespace verbs)"
V3_WANTED = "namespace --help lists " + ", ".join(_mps.NAMESPACE_VERBS)


def mps_v3_row(result, managed=False):
    """Guide row 1 on a node with a host-installed driver, from smshare.kai.mps_info's
    result (installed, v3_supported, v3_missing_verbs). With `managed` (this
    collection's driver play installs r615 next) a missing tool or an old driver
    is PENDING."""
    result = result or {}
    installed = result.get("installed")
    if not installed:
        why = result.get("msg") or "nvidia-cuda-mps-control not found"
        return row(V3_CHECK, "not installed" if installed is False else "unknown: %s" % why, V3_WANTED,
                   PENDING if managed else FAIL,
                   "the driver play installs r615 with its compute utilities next (--tags driver)" if managed
                   else "install the r615 driver's compute utilities (nvidia-cuda-mps-control)")
    if result.get("v3_supported"):
        return row(V3_CHECK, "supported", V3_WANTED, PASS)
    missing = result.get("v3_missing_verbs") or list(_mps.NAMESPACE_VERBS)
    return row(V3_CHECK, "missing " + ", ".join(missing), V3_WANTED, PENDING if managed else FAIL,
               "the driver play installs r615 next (--tags driver)" if managed else
               "the driver is older than r615 (no MPS v3 namespace subcommand): install r615 or newer")


def driver_pods(pods, daemonsets):
    """The running pods of the driver DaemonSet (owner reference by uid), as exec
    targets {pod, node, container (the first: the driver container)}."""
    uids = set((ds.get("metadata") or {}).get("uid") for ds in daemonsets or [])
    uids.discard(None)
    targets = []
    for pod in pods or []:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        owners = set(o.get("uid") for o in meta.get("ownerReferences") or [])
        if not owners & uids or meta.get("deletionTimestamp") or (pod.get("status") or {}).get("phase") != "Running":
            continue
        containers = spec.get("containers") or [{}]
        targets.append({"pod": meta.get("name"), "node": spec.get("nodeName") or "?",
                        "container": containers[0].get("name")})
    return targets


def mps_v3_exec_rows(results, namespace="gpu-operator", daemonset="nvidia-driver-daemonset", managed=False):
    """Guide row 1 with the GPU Operator's driver: `nvidia-cuda-mps-control -p 3
    namespace --help` run in each driver pod (kubernetes.core.k8s_exec results whose
    `item` is {pod, node}). No pod: the driver is not there (PENDING when the driver
    play installs it next)."""
    rows = []
    for result in results or []:
        item = result.get("item") or {}
        where = "%s (%s/%s)" % (item.get("node") or "?", namespace, item.get("pod") or daemonset)
        check = "%s on %s" % (V3_CHECK, where)
        out = "%s\n%s" % (result.get("stdout") or "", result.get("stderr") or "")
        rc = result.get("rc", result.get("return_code"))
        if result.get("failed") and rc is None:
            rows.append(row(check, "exec failed: %s" % (result.get("msg") or "?"), V3_WANTED, FAIL,
                            "check the driver pod runs (kubectl -n %s get pods -o wide) and that the controller's "
                            "identity may exec into it" % namespace))
            continue
        support = _mps.v3_support(_mps.parse_namespace_help(out) if rc == 0 else None)
        if support["supported"]:
            rows.append(row(check, "supported", V3_WANTED, PASS))
        else:
            rows.append(row(check, "missing " + ", ".join(support["missing"]), V3_WANTED, FAIL,
                            "the driver container is older than r615 (no MPS v3 namespace subcommand): set the "
                            "GPU Operator's driver.version to 615.71.09 or newer"))
    if not rows:
        rows.append(row(V3_CHECK, "no %s pod in %s" % (daemonset, namespace), V3_WANTED, PENDING if managed else FAIL,
                        "the driver play installs the GPU Operator's driver next (--tags driver)" if managed else
                        "install the GPU Operator with driver.version 615.71.09 or newer (its driver container holds "
                        "nvidia-cuda-mps-control)"))
    return rows


# ---------------------------------------------------------------- row 7
def fabric_manager_rows(gpu, managed=False, method="host"):
    """Guide row 7: Fabric Manager active on NVSwitch nodes, from smshare.kai.gpu_info's
    result (nvswitch_count, fabricmanager_running). The GPU Operator's driver
    container runs it itself: no host row then."""
    if method == "gpu_operator":
        return []
    gpu = gpu or {}
    check, wanted = "Fabric Manager (NVSwitch nodes)", "active where NVSwitches are"
    if "nvswitch_count" not in gpu:
        why = gpu.get("failure") or gpu.get("msg") or "gpu_info failed"
        return [row(check, "unknown (%s)" % why, wanted, PENDING if managed else FAIL,
                    "the driver play installs the driver and starts Fabric Manager where NVSwitches are next"
                    if managed else "install the driver, then check systemctl is-active nvidia-fabricmanager")]
    if gpu.get("nvswitch_count") is None:
        return [row(check, "unknown: /sys/bus/pci/devices could not be read", wanted, FAIL,
                    "let the preflight read /sys/bus/pci/devices to find the NVSwitches")]
    if not gpu.get("nvswitch_count"):
        return [row(check, "not needed (no NVSwitch)", wanted, PASS)]
    running = gpu.get("fabricmanager_running")
    found = "%d NVSwitches, nvidia-fabricmanager %s" % (
        gpu["nvswitch_count"], "active" if running else ("inactive" if running is False else "state unknown"))
    if running:
        return [row(check, found, wanted, PASS)]
    return [row(check, found, wanted, PENDING if managed else FAIL,
                "the driver play installs and starts nvidia-fabricmanager next (--tags driver)" if managed else
                "install nvidia-fabricmanager of the driver's branch and run systemctl enable --now "
                "nvidia-fabricmanager: multi-GPU NVSwitch boards need it")]


# ---------------------------------------------------------------- "Adjust": k3s/RKE2
def k3s_rows(socket_present, cri_socket_path, k3s_socket=K3S_CRI_SOCKET):
    """k3s or RKE2 (their containerd socket exists): the CRI socket path must be theirs."""
    if not socket_present:
        return []
    ok = cri_socket_path == k3s_socket
    return [row("k3s/RKE2", "detected (%s)" % k3s_socket, "its CRI socket path configured", PASS if ok else FAIL,
                "" if ok else "set smshare_cri_socket_path=%s (fractioningAgent.criSocketPath)" % k3s_socket)]
