# -*- coding: utf-8 -*-
# Apache-2.0
"""Rows of the guide's "Cluster and Nodes" table that the preflight role checks
(pure functions of API objects and module results, unit-tested alone; filters:
plugins/filter/preflight_rows.py). Every function returns rows in the
preflight role's shape: {check, found, wanted, status (PASS, FAIL, PENDING, WARN), fix};
driver_rows, runtime_rows and cluster_rows make a task file's whole share of the
table from what it registered, and verdict the role's closing messages.

Sources: the guide's table (rows 1, 4, 5, 7, 8 and "Adjust for your
environment"); the fork's mpsd pod limit (gpu-fractioning
operator/internal/fractioningmanager/components/mpsd/mpsd.go @ db0ba2ec:
requests 50m/128Mi, limit 1Gi, "1Gi covers a 16-GPU node"); the binder's
event (guide, Troubleshooting row 10); what each KAI sharing mode enforces of
GPU memory (KAI-Scheduler docs/gpu-sharing/README.md, its "GPU-sharing modes"
table, and pkg/apis/kai/v1/common's GpuSharingMode: NonMemoryEnforced "without
memory limit enforcement"; REFERENCE.md: below GPU Operator v26.7.1 the cap
rests on the environment variable alone)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import re

try:  # Python 3.11+ on the controller (the preflight filters run there)
    import tomllib
except ImportError:  # pragma: no cover - older Pythons
    tomllib = None

from ansible.module_utils.compat.version import LooseVersion

from ansible_collections.smshare.kai.plugins.module_utils import mps as _mps

PASS, FAIL, PENDING = "PASS", "FAIL", "PENDING"
# Said plainly, fails nothing: a choice the cluster may make on purpose.
WARN = "WARN"

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


def _pending_or_fail(managed):
    return PENDING if managed else FAIL


def whole_number(value):
    """A value read as a whole number the way the roles' Jinja `int` read it: 0 when it is none."""
    try:
        return int(value, 10) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError, OverflowError):
            return 0


def at_least(version, floor):
    """version >= floor compared as Ansible's `version` test does (LooseVersion: 13.10 > 13.4);
    false for no version, or versions that cannot be compared."""
    if version is None or str(version) == "" or floor is None or str(floor) == "":
        return False
    try:
        return LooseVersion(str(version)) >= LooseVersion(str(floor))
    except TypeError:
        return False


def _unique(items):
    """Items in first-seen order without repeats (case-insensitive, as Jinja's unique)."""
    seen, kept = set(), []
    for item in items:
        key = item.lower() if isinstance(item, str) else item
        if key not in seen:
            seen.add(key)
            kept.append(item)
    return kept


def _text(value):
    return "%s" % (value,)


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


# ---------------------------------------------------------------- GPU memory enforcement
MEMORY_CHECK = "GPU memory enforcement"
MEMORY_WANTED = "pods held to their GPU memory (NvFractions, GPU Operator >= v26.7.1)"
# The GPU Operator from which the container toolkit's memory-limit hook makes the cap driver-enforced.
MEMORY_HOOK_VERSION = "26.7.1"


def memory_enforcement_rows(mode, gpu_operator_minimum=None, knob="smshare_gpu_sharing_mode"):
    """A WARN row (said plainly, failing nothing) when the configured KAI sharing mode
    does not hold a fractional pod to its GPU memory: NonMemoryEnforced (KAI places
    pods by memory and enforces none), HamiCore (HAMi-core enforces it, which this
    collection does not install), Disabled (no sharing at all), or NvFractions with
    the GPU Operator floor below v26.7.1 (the cap rests on CUDA_MPS_PINNED_DEVICE_MEM_LIMIT,
    which a pod can change). No row when memory is enforced or nothing is known
    (no mode, or a floor of "" that skips the version check)."""
    if mode == "NonMemoryEnforced":
        return [row(MEMORY_CHECK, "NonMemoryEnforced: GPU memory is not enforced", MEMORY_WANTED, WARN,
                    "KAI places fractional pods by their memory request but nothing holds a pod to it: containers "
                    "may see and use more GPU memory than requested, so one pod can take its neighbours' memory. "
                    "Set %s: NvFractions (the forks' mode) before sharing GPUs between teams, and run the smoke "
                    "test's greedy-neighbour check (smoke_test_greedy_neighbour)" % knob)]
    if mode == "HamiCore":
        return [row(MEMORY_CHECK, "HamiCore: GPU memory is enforced only by HAMi-core, which this collection does "
                    "not install", MEMORY_WANTED, WARN,
                    "install HAMi's kai-resource-isolator yourself, or set %s: NvFractions (the forks' mode)" % knob)]
    if mode == "Disabled":
        return [row(MEMORY_CHECK, "Disabled: no GPU sharing (fractional pods are refused)", MEMORY_WANTED, WARN,
                    "set %s: NvFractions to share GPUs with the forks' enforced fractions" % knob)]
    minimum = "%s" % (gpu_operator_minimum or "",)
    minimum = minimum[1:] if minimum.startswith("v") else minimum
    if mode == "NvFractions" and minimum and not at_least(minimum, MEMORY_HOOK_VERSION):
        return [row(MEMORY_CHECK, "NvFractions with GPU Operator v%s: the memory cap rests on "
                    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT alone" % minimum, MEMORY_WANTED, WARN,
                    "below v%s the container toolkit has no memory-limit hook, so the driver does not enforce the "
                    "cap and a pod can raise or remove its own limit: upgrade the GPU Operator to v%s or newer and "
                    "unset smshare_gpu_operator_minimum_version" % (MEMORY_HOOK_VERSION, MEMORY_HOOK_VERSION))]
    return []


# ---------------------------------------------------------------- "Adjust": k3s/RKE2
def k3s_rows(socket_present, cri_socket_path, k3s_socket=K3S_CRI_SOCKET):
    """k3s or RKE2 (their containerd socket exists): the CRI socket path must be theirs."""
    if not socket_present:
        return []
    ok = cri_socket_path == k3s_socket
    return [row("k3s/RKE2", "detected (%s)" % k3s_socket, "its CRI socket path configured", PASS if ok else FAIL,
                "" if ok else "set smshare_cri_socket_path=%s (fractioningAgent.criSocketPath)" % k3s_socket)]


# ---------------------------------------------------------------- driver.yml: rows 1 and 7
def driver_rows(gpu, mps=None, branch=615, min_cuda_version="13.4", managed=False, method="host"):
    """A GPU node's driver rows from smshare.kai.gpu_info's result (`gpu`) and, with a
    host-installed driver, smshare.kai.mps_info's (`mps`): the branch, the CUDA version
    fractions need, MPS v3 and Fabric Manager. With `managed` (this collection's driver
    play installs the branch next) what the driver brings is PENDING, not FAIL."""
    gpu = gpu or {}
    read = "failure" not in gpu
    branch_ok = read and whole_number(gpu.get("driver_branch", 0)) == whole_number(branch)
    cuda_ok = read and "cuda_version" in gpu and at_least(gpu["cuda_version"], min_cuda_version)
    if managed:
        branch_fix = "the driver play installs r%s next (--tags driver)" % (branch,)
        cuda_fix = "the driver play installs a driver that supports it next"
    else:
        branch_fix = "install the r%s driver (GPU Operator: --set driver.version=...)%s" % (
            branch, "" if read else ": %s" % (gpu.get("msg"),))
        cuda_fix = "upgrade the driver to a branch that supports CUDA %s" % (min_cuda_version,)
    rows = [row("driver branch", gpu["driver_version"] if "driver_version" in gpu else gpu.get("failure", "unknown"),
                "r%s" % (branch,), PASS if branch_ok else _pending_or_fail(managed), branch_fix),
            row("CUDA version (fractions)", gpu.get("cuda_version", "unknown"), ">= %s" % (min_cuda_version,),
                PASS if cuda_ok else _pending_or_fail(managed), cuda_fix)]
    if method == "host":
        rows.append(mps_v3_row(mps, managed))
    return rows + fabric_manager_rows(gpu, managed, method)


# ---------------------------------------------------------------- runtime.yml: containerd
CONTAINERD_VERSION_RE = re.compile(r"v?([0-9]+\.[0-9]+(\.[0-9]+)?)")
NRI_FIX = 'set disable = false under [plugins."io.containerd.nri.v1.nri"] and restart containerd'
NRI_PLUGIN = "io.containerd.nri.v1.nri"
NRI_DEFAULT_SOCKET = "/var/run/nri/nri.sock"


def containerd_version(stdout):
    """The version `containerd --version` prints (2.0.4), "" when it printed none."""
    match = CONTAINERD_VERSION_RE.search(stdout or "")
    return match.group(1) if match else ""


def slurped_text(result):
    """The text of an ansible.builtin.slurp result, "" when the file could not be read."""
    content = (result or {}).get("content") or ""
    return base64.b64decode(content).decode("utf-8", "surrogateescape")


def containerd_nri(config_text, runtime_version=None):
    """Is NRI enabled in a containerd config.toml?

    The config decides: `disable = true` in the NRI plugin's section or the
    plugin in `disabled_plugins` turns it off, `disable = false` on. Without a
    section containerd's default applies: on from 2.0, off in 1.7.
    runtime_version: containerd's version (2.0.4, v1.7.22, containerd://2.0.4);
    unknown is read as 2.x. Whether the version is new enough for fractions is
    a separate check. Returns {enabled, reason, socket_path, section}.
    """
    if tomllib is None:  # pragma: no cover
        raise RuntimeError("containerd_nri needs Python 3.11 (tomllib) on the controller")
    try:
        config = tomllib.loads(config_text or "")
    except tomllib.TOMLDecodeError as exc:
        return {"enabled": False, "reason": "the containerd config is not valid TOML: %s" % exc,
                "socket_path": None, "section": False}
    version = None
    if runtime_version:
        match = re.search(r"(\d+)\.(\d+)", str(runtime_version))
        version = (int(match.group(1)), int(match.group(2))) if match else None
    section = (config.get("plugins") or {}).get(NRI_PLUGIN)
    socket_path = (section or {}).get("socket_path") or NRI_DEFAULT_SOCKET
    result = {"enabled": False, "reason": "", "socket_path": socket_path, "section": section is not None}
    if NRI_PLUGIN in (config.get("disabled_plugins") or []):
        result["reason"] = "%s is listed in disabled_plugins" % NRI_PLUGIN
    elif section is not None and section.get("disable") is True:
        result["reason"] = "NRI plugin section sets disable = true"
    elif section is not None and section.get("disable") is False:
        result.update(enabled=True, reason="NRI plugin section sets disable = false")
    elif version is not None and version < (2, 0):
        result["reason"] = ("containerd %d.%d leaves NRI off unless its plugin section sets disable = false"
                            % version)
    else:
        result.update(enabled=True, reason="enabled by default (containerd %s)"
                      % ("%d.%d" % version if version else "2.x"))
    return result


def _stat(result):
    return (result or {}).get("stat") or {}


def runtime_rows(reads, paths, nri, describe):
    """A GPU node's container runtime rows: the CRI socket (or, on MicroK8s, the link
    the gpu_fractioning role makes to its socket), the NRI socket, NRI in the
    containerd config, MicroK8s' and k3s/RKE2's paths.

    reads: what runtime.yml registered (smshare.kai.container_runtime_info: cri,
    cri_target, nri, microk8s, k3s as ansible.builtin.stat results). paths: the
    role's cri_socket, cri_socket_link_target ("" for none), nri_socket,
    containerd_config, microk8s_dir, k3s_cri_socket. nri: containerd_nri's answer
    for the config. describe: a stat in words (plugins/filter/report_text.py's stat_kind)."""
    cri, target = _stat(reads.get("cri")), paths.get("cri_socket_link_target") or ""
    cri_path, nri_path, microk8s = paths["cri_socket"], paths["nri_socket"], paths["microk8s_dir"]
    rows = []
    if target:
        if cri.get("islnk"):
            link = "-> %s" % (cri.get("lnk_source"),)
        else:
            link = "not a link" if cri.get("exists") else "missing"
        cri_target = _stat(reads.get("cri_target"))
        rows += [row("CRI socket link", link, "-> " + target,
                     PASS if link == "-> " + target else (FAIL if cri.get("exists") else PENDING),
                     "remove %s (the role links it to %s)" % (cri_path, target) if cri.get("exists")
                     else "the gpu_fractioning role creates it"),
                 row("CRI socket", describe(cri_target), "socket " + target, PASS if cri_target.get("issock") else FAIL,
                     "start containerd, or set smshare_cri_socket_link_target to its socket")]
    else:
        rows.append(row("CRI socket", describe(cri), "socket " + cri_path, PASS if cri.get("issock") else FAIL,
                        "start containerd, or set smshare_cri_socket_path to its socket"))
    nri_socket = _stat(reads.get("nri"))
    rows += [row("NRI socket", describe(nri_socket), "socket " + nri_path, PASS if nri_socket.get("issock") else FAIL,
                 "enable NRI in containerd (see the NRI row) and restart it, or set smshare_nri_socket_path"),
             row("NRI in containerd config", nri["reason"], "enabled (%s)" % paths["containerd_config"],
                 PASS if nri["enabled"] else FAIL, NRI_FIX)]
    if _stat(reads.get("microk8s")).get("exists"):
        ok = nri_path.startswith(microk8s) and (cri_path.startswith(microk8s) or target.startswith(microk8s))
        rows.append(row("MicroK8s", "detected at " + microk8s, "its socket paths configured", PASS if ok else FAIL,
                        "set smshare_cri_socket_path=/opt/kai-runtime/containerd.sock, smshare_cri_socket_link_target="
                        "%s/common/run/containerd.sock, smshare_nri_socket_path=%s/common/run/nri.sock, "
                        "smshare_containerd_config_path=%s/current/args/containerd-template.toml"
                        % (microk8s, microk8s, microk8s)))
    return rows + k3s_rows(bool(_stat(reads.get("k3s")).get("exists")), cri_path, paths["k3s_cri_socket"])


# ---------------------------------------------------------------- cluster.yml
def rbac_rows(results, kubeconfig):
    """The guide's RBAC table: one row per SelfSubjectAccessReview (kubernetes.core.k8s
    loop results whose item is {resource, group})."""
    rows = []
    for result in results or []:
        item = result.get("item") or {}
        status = ((result.get("result") or {}).get("status")) or {}
        allowed = status.get("allowed", False)
        if allowed:
            found = "yes"
        elif "result" in result:
            found = "no" + (": %s" % (status["reason"],) if status.get("reason") else "")
        else:
            found = "error: %s" % (result.get("msg", "?"),)
        group = " (%s)" % (item["group"],) if item.get("group") else ""
        rows.append(row("may create %s" % (item.get("resource"),), found, "yes, all namespaces",
                        PASS if allowed else FAIL,
                        "grant create on %s%s to the identity of %s (cluster-admin installs the charts)"
                        % (item.get("resource"), group,
                           kubeconfig or "the default kubeconfig (KUBECONFIG or ~/.kube/config)")))
    return rows


def runtime_class_row(result, name):
    """The RuntimeClass KAI's reservation pod and the fractioning daemons use (k8s_info result)."""
    result = result or {}
    resources = result.get("resources") or []
    if resources:
        found = "handler %s" % (resources[0].get("handler"),)
    else:
        found = "error: %s" % (result["msg"],) if "msg" in result else "missing"
    return row("RuntimeClass %s" % (name,), found, "exists", PASS if resources else FAIL,
               "create the RuntimeClass %s (the GPU Operator's toolkit does; handler nvidia), or set "
               "smshare_runtime_class to the NVIDIA RuntimeClass: without it fractional pods stay Pending" % (name,))


def stack_floors(gpu_operator_minimum, floors):
    """{image name: lowest version}: the GPU Operator's (its leading v dropped; none when
    "") first, then the rest of the stack's."""
    minimum = "%s" % (gpu_operator_minimum or "",)
    combined = {"gpu-operator": minimum[1:] if minimum.startswith("v") else minimum} if minimum else {}
    combined.update(floors or {})
    return combined


def stack_rows(stack, floors):
    """The GPU stack's versions against their floors. stack: component_images' answer
    (plugins/filter/images.py) for the floors' names ({name: [{namespace, workload, version}]})."""
    rows = []
    for name, floor in floors.items():
        images = stack.get(name) or []
        found = [image for image in images if image.get("version")]
        low = [image for image in found if not at_least(image["version"], floor)]
        if found:
            where = ["%s/%s" % (image.get("namespace"), image.get("workload")) for image in found]
            text = "%s (%s)" % (", ".join(_unique([_text(i["version"]) for i in found])), ", ".join(_unique(where)))
        else:
            text = "image without a version tag" if images else "not found"
        if name == "gpu-operator":
            fix = ("install or upgrade the GPU Operator to v%s or newer (the gpu-fractioning chart refuses to start "
                   "below its gpuOperator.minimumVersion), or lower smshare_gpu_operator_minimum_version: v26.7.0 "
                   'runs with the MPS-only memory cap, "" skips the check' % (floor,))
        else:
            fix = ("install or upgrade the GPU Operator (v%s or newer) so that %s runs at %s or newer"
                   % (floors.get("gpu-operator", "26.7.1"), name, floor))
        rows.append(row("%s version" % name, text, ">= %s" % (floor,), PASS if found and not low else FAIL, fix))
    return rows


def _ready(node):
    """The node's Ready condition ({} when it has none; the last one when listed twice)."""
    ready = {}
    for condition in ((node.get("status") or {}).get("conditions")) or []:
        if condition.get("type") == "Ready":
            ready = condition
    return ready


def node_rows(result, selector, min_containerd_version):
    """The GPU nodes Kubernetes lists under the selector (k8s_info result): Ready,
    containerd new enough for NRI, GPUs allocatable; a FAIL row when there is none."""
    result = result or {}
    nodes = result.get("resources") or []
    rows = []
    if not nodes:
        why = " (%s)" % (result["msg"],) if "msg" in result else ""
        rows.append(row("GPU nodes", "none with %s%s" % (selector, why),
                        "at least one", FAIL, "label the GPU nodes (the GPU Operator sets %s)" % (selector,)))
    for node in nodes:
        status = node.get("status") or {}
        ready = _ready(node)
        ready_ok = ready.get("status") == "True"
        runtime = (status.get("nodeInfo") or {}).get("containerRuntimeVersion") or ""
        version = re.search(r"([0-9]+\.[0-9]+(\.[0-9]+)?)", runtime)
        runtime_ok = (runtime.startswith("containerd://") and bool(version)
                      and at_least(version.group(), min_containerd_version))
        allocatable = status.get("allocatable") or {}
        gpus = allocatable[GPU_RESOURCE] if GPU_RESOURCE in allocatable else "0"
        found = "Ready=%s, %s, %s nvidia.com/gpu" % (ready["status"] if "status" in ready else "missing",
                                                     runtime or "no runtime", gpus)
        fix = (("" if ready_ok else "node not Ready; ")
               + ("" if runtime_ok else "upgrade containerd to %s or newer (NRI); " % (min_containerd_version,))
               + ("" if whole_number(gpus) else "no allocatable nvidia.com/gpu: the device plugin does not run there"))
        rows.append(row("node %s" % ((node.get("metadata") or {}).get("name"),), found,
                        "Ready, containerd >= %s, GPUs allocatable" % (min_containerd_version,),
                        PASS if ready_ok and runtime_ok and whole_number(gpus) > 0 else FAIL, fix))
    return rows


def cluster_rows(reads, settings, stack):
    """The controller's rows, in the table's order: RBAC, the RuntimeClass, the GPU
    stack's versions, the GPU nodes, their labels and mpsd's memory, MPS v3 in the
    GPU Operator's driver pods, and a warning when the sharing mode does not enforce
    GPU memory.

    reads: what cluster.yml registered (access, runtime_class, nodes, all_nodes,
    mps_exec). settings: the role's kubeconfig, runtime_class, gpu_node_selector,
    min_containerd_version, gpu_stack_floors (stack_floors' answer),
    mpsd_memory_limit (None: unset), driver_method, gpu_operator_namespace,
    driver_daemonset, driver_managed, and optionally gpu_sharing_mode (KAI's
    gpuSharingMode) and gpu_operator_minimum (the chart's floor, for that warning).
    stack: component_images' answer (plugins/filter/images.py) for the floors' names."""
    selector = settings["gpu_node_selector"]
    every_node = (reads.get("all_nodes") or {}).get("resources") or []
    rows = (rbac_rows((reads.get("access") or {}).get("results"), settings["kubeconfig"])
            + [runtime_class_row(reads.get("runtime_class"), settings["runtime_class"])]
            + stack_rows(stack, settings["gpu_stack_floors"])
            + node_rows(reads.get("nodes"), selector, settings["min_containerd_version"])
            + gpu_present_rows(every_node, selector) + gpu_memory_rows(every_node, selector)
            + mpsd_memory_rows(every_node, selector, settings.get("mpsd_memory_limit")))
    if settings["driver_method"] == "gpu_operator":
        rows += mps_v3_exec_rows((reads.get("mps_exec") or {}).get("results"), settings["gpu_operator_namespace"],
                                 settings["driver_daemonset"], settings["driver_managed"])
    return rows + memory_enforcement_rows(settings.get("gpu_sharing_mode"), settings.get("gpu_operator_minimum"))


# ---------------------------------------------------------------- report.yml
def verdict(rows, host):
    """The table's outcome: {ok (no FAIL row), passed, failed (rows), pending (checks),
    warnings (rows), message (the failure, every failed row with its fix), summary (with
    every warning and its fix)}."""
    failed = [r for r in rows if r.get("status") == FAIL]
    pending = [r.get("check") for r in rows if r.get("status") == PENDING]
    warnings = [r for r in rows if r.get("status") == WARN]
    passed = len([r for r in rows if r.get("status") == PASS])

    def shown(value):  # a value as a template shows it: none as nothing
        return "" if value is None else _text(value)

    message = "Preflight failed on %s (%d of %d rows): %s Nothing was installed." % (
        host, len(failed), len(rows), "".join("[%s: found %s, wanted %s; %s] " % tuple(
            shown(r.get(key)) for key in ("check", "found", "wanted", "fix")) for r in failed))
    summary = "%d rows passed %s" % (passed, ", %s pending (converged later in this run)"
                                     % ", ".join(shown(c) for c in pending) if pending else "")
    summary += "".join("; WARNING %s: %s: %s" % (shown(r.get("check")), shown(r.get("found")), shown(r.get("fix")))
                       for r in warnings)
    return {"ok": not failed, "passed": passed, "failed": failed, "pending": pending, "warnings": warnings,
            "message": message, "summary": summary}
