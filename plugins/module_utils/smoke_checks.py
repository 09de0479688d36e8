# -*- coding: utf-8 -*-
# Apache-2.0
"""The guide's step 5 ("Verify With a Two-Pod Smoke Test") and "Measure the
Effective SM Share" as pure functions: the pods to create, the parsers of what
the pods and the MPS server answer, the four checks and the SM-share
measurement, the "why pending" diagnosis, and the reports (text table,
Markdown, JUnit XML). The module `fraction_smoke_test` does the I/O; the unit
tests call these alone on recorded and composed objects.

Names, formats and pass conditions come from the published guide's check
table and from upstream KAI-Scheduler's binder and gpu-fractioning's fractiond
and mpsd (annotation, variable and namespace names below, with their sources).
What was inferred rather than read is marked (unverified).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import inspect
import math
import re
from xml.sax.saxutils import escape, quoteattr

from ansible_collections.smshare.kai.plugins.module_utils import gpu_probe
from ansible_collections.smshare.kai.plugins.module_utils import mps
from ansible_collections.smshare.kai.plugins.module_utils import troubleshooting

# ---------------------------------------------------------------- the guide's pods
SCHEDULER = "kai-scheduler"
QUEUE_LABEL = "kai.scheduler/queue"
LEGACY_QUEUE_LABEL = "runai/queue"
CONTAINER = "main"
POD_NAMES = ("fraction-smoke-a", "fraction-smoke-b")
DEVICEQUERY_POD = "fraction-devicequery"
DEFAULT_IMAGE = "nvidia/cuda:13.3.1-base-ubuntu24.04"
DEFAULT_DEVICEQUERY_IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:devicequery"
DEFAULT_NAMESPACE = "default"
DEFAULT_QUEUE = "default-queue"
DEFAULT_FRACTION = 0.5
MANAGED_BY = ("app.kubernetes.io/managed-by", "smshare.kai.fraction_smoke_test")
RUN_LABEL = "smshare.kai/smoke-test"      # which run (node) a pod belongs to
HOSTNAME_LABEL = "kubernetes.io/hostname"
# The taint a cordoned node carries (the scheduler treats spec.unschedulable as it).
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
HOSTILE_PERCENTAGE = "100"

# ---------------------------------------------------------------- what the binder writes
# nvidia.com/container.<container>.<what> (KAI-Scheduler pkg/binder/plugins/nvfractions/nv_fractions.go
# and pkg/common/constants/constants.go @ e396c876a7915094086b1b3e980f76fc1c73c3de)
PORTION = "gpu-compute.portion"
MODE = "gpu-compute.mode"
MEMORY_REQUEST = "gpu-memory.request"
MEMORY_LIMIT = "gpu-memory.limit"
DEVICES = "gpus.devices"
GPU_GROUP_LABEL = "runai-gpu-group"
RESERVATION_NAMESPACE = "kai-resource-reservation"
RESERVATION_PREFIX = "gpu-reservation"
RESERVATION_GPU_ANNOTATION = "run.ai/reserve_for_gpu_index"   # holds the GPU UUID despite its name
# What the binder recorded of the bind request: "Fraction" or "Regular" (binder.go patchBindAnnotations).
RECEIVED_RESOURCE_TYPE = "received-resource-type"
# The binder's memory per GPU: the node label (GPU Feature Discovery) less its
# reservedGpuMemory argument, 1Gi by default, the MPS server's own context (same commit).
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
DEFAULT_RESERVED_GPU_MEMORY_MIB = 1024

# ---------------------------------------------------------------- what fractiond injects
# gpu-fractioning fractiond internal/injection/injection.go: singular memory names @ db0ba2ec (the
# container toolkit's memory-limit hook reads those), plural at kai-gpu-fractioning @ 0ee10b42: which
# one the pinned af0544e uses is not in any source, so both are read and the one found is reported.
ENV_PIPE = "CUDA_MPS_PIPE_DIRECTORY"
ENV_PERCENTAGE = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
ENV_PINNED = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
ENV_MEMORY_REQUEST = "NVIDIA_GPU_MEMORY_REQUEST"
ENV_MEMORY_LIMIT = "NVIDIA_GPU_MEMORY_LIMIT"
ENV_MEMORY_SPELLINGS = {ENV_MEMORY_REQUEST: ("NVIDIA_GPU_MEMORY_REQUEST", "NVIDIA_GPU_MEMORY_REQUESTS"),
                        ENV_MEMORY_LIMIT: ("NVIDIA_GPU_MEMORY_LIMIT", "NVIDIA_GPU_MEMORY_LIMITS")}
ENV_DEVICES = "NVIDIA_VISIBLE_DEVICES"
ENV_NAMES = (ENV_PIPE, ENV_PERCENTAGE, ENV_PINNED) + ENV_MEMORY_SPELLINGS[ENV_MEMORY_REQUEST] \
    + ENV_MEMORY_SPELLINGS[ENV_MEMORY_LIMIT] + (ENV_DEVICES,)
# The device list fractiond's upstream counterpart leaves when the pair is mismatched (the guide's
# troubleshooting: fork node agents with an upstream scheduler, or the reverse).
VOID_DEVICES = "void"

# ---------------------------------------------------------------- what the MPS server shows
# mpsd caps the server's default namespace, defence in depth for a pod handed the
# server's pipe directory (gpu-fractioning mpsns/manager.go DefaultDefaultNamespaceATP).
MPS_DEFAULT_NAMESPACE = "default"
MPS_DEFAULT_PERCENTAGE = 10

# ---------------------------------------------------------------- the checks
CHECKS = ("binder", "injection", "mps", "memory", "sm_share")
CHECK_TITLES = {
    "binder": "1. binder decision (portion, memory, GPU UUID)",
    "injection": "2. fractiond injection (CUDA_MPS_*, NVIDIA_GPU_MEMORY_*, NVIDIA_VISIBLE_DEVICES)",
    "mps": "3. MPS server enforces (namespace list --server=shared: kai_* and default)",
    "memory": "4. pod's view of GPU memory with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100",
    "sm_share": "SM share measured by deviceQuery",
    "greedy": "greedy neighbour: a pod asking for every SM and more memory than its cap is held to its share "
              "beside one that keeps to it",
}
# Opt-in (greedy_neighbour), after the others: not in CHECKS.
GREEDY_CHECK = "greedy"
EPSILON = 1e-6

# SMs per GPU by product name (NVIDIA's published figures); the module's
# gpu_sm_count option wins. Matched as substrings of the product name, longest first.
SM_COUNTS = {
    "A100": 108, "A800": 108, "A30": 56, "A10": 72, "A40": 84, "L4": 58, "L40S": 142, "L40": 142,
    "H100 PCIe": 114, "H100-PCIE": 114, "H100": 132, "H800": 132, "H200": 132, "H20": 78, "GH200": 132,
    "B200": 148, "V100": 80, "T4": 40,
}


class SmokeError(Exception):
    """A failure with a name (module RETURN `failure`)."""

    def __init__(self, msg, failure="failed", **details):
        super(SmokeError, self).__init__(msg)
        self.msg = msg
        self.failure = failure
        self.details = details


LOST_API = ("Connection refused", "Max retries exceeded", "timed out", "Connection reset", "Name or service not known")


def pods_left(cause, cleanup, left):
    """The error of a run whose pods could not be deleted (`cleanup`, a SmokeError): its own
    cause first when it had one (an API server lost mid-run breaks both), the pods left
    named, and that the next run deletes them before it starts."""
    said = "%s" % (cause.msg if isinstance(cause, SmokeError) else cause or "")
    note = ("the test pods could not be deleted (%s): %s left in the cluster; the next run deletes them before it "
            "starts" % (cleanup.msg, ", ".join(left) or "none known"))
    if any(word in said + cleanup.msg for word in LOST_API):
        note += ". The API server stopped answering: check it (kubectl get --raw /readyz), then run again"
    if isinstance(cause, SmokeError):
        return SmokeError("%s. Also, %s" % (cause.msg, note), cause.failure, **cause.details)
    if cause is not None:
        return SmokeError("%s. Also, %s" % (said, note), "cluster")
    return SmokeError(note[0].upper() + note[1:], "cluster")


def annotation(container, what):
    return "nvidia.com/container.%s.%s" % (container, what)


def pod_names(suffix=""):
    """The guide's names, with `-<suffix>` when several runs share a namespace."""
    tail = "-" + suffix if suffix else ""
    return [name + tail for name in POD_NAMES], DEVICEQUERY_POD + tail


def run_key(node):
    """The value of RUN_LABEL for a run on `node` (any node: `any`)."""
    if not node:
        return "any"
    key = re.sub(r"[^A-Za-z0-9_.-]", "-", node)[:63].strip("-_.")
    return key or "node"


def pod_manifest(name, namespace, queue, fraction, image, node=None, run="any", command=None, env=None,
                 scheduler=SCHEDULER, runtime_class="nvidia", pull_secrets=(), pull_policy=None,
                 restart="Never", container=CONTAINER, tolerate_unschedulable=False):
    """One of the guide's half-GPU pods (step 5, or the deviceQuery pod)."""
    labels = {MANAGED_BY[0]: MANAGED_BY[1], RUN_LABEL: run}
    if queue:
        labels[QUEUE_LABEL] = queue
    main = {
        "name": container,
        "image": image,
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    if command:
        main["command"] = list(command)
    if env:
        main["env"] = [{"name": k, "value": v} for k, v in env]
    if pull_policy:
        main["imagePullPolicy"] = pull_policy
    spec = {
        "schedulerName": scheduler,
        "restartPolicy": restart,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
        "containers": [main],
    }
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    if node:
        spec["nodeSelector"] = {HOSTNAME_LABEL: node}
    if tolerate_unschedulable:
        # On a cordoned node, as a rolling upgrade validates a node before uncordoning it.
        spec["tolerations"] = [{"key": UNSCHEDULABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"}]
    if pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in pull_secrets]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": namespace, "labels": labels,
            "annotations": {"gpu-fraction": fraction_text(fraction),
                            annotation(container, MODE): "sm-sharing"},
        },
        "spec": spec,
    }


def fraction_text(fraction):
    return ("%.6f" % fraction).rstrip("0").rstrip(".")


def manifests(params, run):
    """(smoke pods, deviceQuery pod or None) for the module's parameters."""
    names, dq_name = pod_names(params.get("name_suffix") or "")
    common = dict(namespace=params["namespace"], queue=params["queue"], fraction=params["fraction"],
                  node=params.get("node"), run=run, scheduler=params.get("scheduler_name") or SCHEDULER,
                  runtime_class=params.get("runtime_class"), pull_secrets=params.get("image_pull_secrets") or (),
                  pull_policy=params.get("image_pull_policy"),
                  tolerate_unschedulable=bool(params.get("tolerate_unschedulable")))
    pods = [pod_manifest(name, image=params["image"], command=params.get("command") or ["sleep", "3600"], **common)
            for name in names]
    dq = None
    if params.get("measure_sm_share", True):
        dq = pod_manifest(dq_name, image=params["devicequery_image"], env=[(ENV_PERCENTAGE, HOSTILE_PERCENTAGE)],
                          command=params.get("devicequery_command") or None, **common)
    return pods, dq


# ---------------------------------------------------------------- quantities and parsers
QUANTITY_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?")
QUANTITY_UNITS = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
                  "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60}


def quantity_mib(text):
    """A Kubernetes quantity ("20Gi", "20480Mi", "21474836480") in MiB (int, rounded down)."""
    match = QUANTITY_RE.fullmatch(str(text).strip())
    if not match:
        raise ValueError("not a Kubernetes quantity: %r" % (text,))
    return int(float(match.group(1)) * QUANTITY_UNITS[match.group(2)] // (2 ** 20))


def expected_percentage(portion):
    """What fractiond makes of a compute portion: 0.5 -> 50, rounded down, never below 1 (MPS reads 0
    as unlimited). The newest fractiond floors (0.336 -> 33); db0ba2ec rounded (34): at the guide's 0.5
    both give 50."""
    return max(1, int(math.floor(portion * 100 + EPSILON)))


def accepted_percentages(portion):
    """What a fork may make of a portion: rounded down (the newest fractiond) or to the
    nearest (db0ba2ec); which one the pinned af0544e does is in no source."""
    return sorted(set([expected_percentage(portion), max(1, int(math.floor(portion * 100 + 0.5)))]))


def expected_memory_mib(gpu_memory_mib, fraction, reserved_mib=DEFAULT_RESERVED_GPU_MEMORY_MIB):
    """The guide's check 2: N = (GPU memory in MiB - 1024) x fraction, the binder's memory request
    (usable memory x portion, rounded down), also the pinned limit fractiond injects."""
    return int(math.floor((gpu_memory_mib - reserved_mib) * fraction + EPSILON))


def node_gpu_memory_mib(node):
    """The node's nvidia.com/gpu.memory label (MiB, GPU Feature Discovery), or None."""
    raw = ((node or {}).get("metadata") or {}).get("labels", {}).get(GPU_MEMORY_LABEL)
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return int(value) if value > 0 else None


def container_id(pod, container=CONTAINER):
    """The runtime's ID of a pod's container (status.containerStatuses[].containerID without
    its `containerd://` scheme), or None before it was created."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == container and status.get("containerID"):
            return status["containerID"].split("://", 1)[-1]
    return None


# ---------------------------------------------------------------- who placed a pod
# The schedulerName the API server gives a pod that names none.
DEFAULT_SCHEDULER = "default-scheduler"
NO_SCHEDULER_LOOKED = "no PodScheduled condition: no scheduler looked at it"
PLACEMENT_PROBLEMS = ("not_placed", "other_scheduler")


def placement(pod, events=(), scheduler=None):
    """Who placed a pod, and where: the one reading of it the smoke test's checks
    and the kai_pilot role's half-GPU step share (filter smshare.kai.pod_placement).

    pod: the Pod as the API returns it ({} when it was not found). events: Events
    about it (those about an earlier pod of the same name are left out). Returns
    scheduler_name (spec.schedulerName, the API server's default-scheduler when
    unset), node (spec.nodeName, '' before binding), placed_by (the component of
    its Scheduled event: source.component, else reportingComponent; '' without
    one), message (that event's), waiting (the PodScheduled condition's message;
    a fixed text when no scheduler wrote one) and, when `scheduler` is given, ok
    (placed, by it, and the pod names it) and problem (None, not_placed or
    other_scheduler)."""
    spec = pod.get("spec") or {}
    scheduled = [e for e in events_of(pod, events or ()) if e.get("reason") == "Scheduled"]
    components = [(e.get("source") or {}).get("component") for e in scheduled] \
        + [e.get("reportingComponent") for e in scheduled]
    conditions = [c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"]
    found = {"scheduler_name": spec.get("schedulerName") or DEFAULT_SCHEDULER,
             "node": spec.get("nodeName") or "",
             "placed_by": next((c for c in components if c), ""),
             "message": (scheduled[0].get("message") or "") if scheduled else "",
             "waiting": (conditions[0].get("message") or "") if conditions else NO_SCHEDULER_LOOKED}
    if scheduler is not None:
        if not found["node"]:
            found["problem"] = "not_placed"
        elif found["scheduler_name"] != scheduler or found["placed_by"] != scheduler:
            found["problem"] = "other_scheduler"
        else:
            found["problem"] = None
        found["ok"] = found["problem"] is None
    return found


def binder_decision(pod, container=CONTAINER):
    """What KAI's binder wrote on the pod: portion, memory (MiB), devices (GPU UUIDs),
    node and GPU group. Missing values are None; `problems` lists unreadable ones."""
    meta = pod.get("metadata") or {}
    notes = meta.get("annotations") or {}
    problems = []
    where = placement(pod)
    decision = {"pod": meta.get("name"), "node": where["node"] or None,
                "scheduler": where["scheduler_name"],
                "gpu_group": (meta.get("labels") or {}).get(GPU_GROUP_LABEL),
                "annotations": dict(sorted((k, v) for k, v in notes.items() if k.startswith("nvidia.com/"))),
                "portion": None, "memory_request_mib": None, "memory_limit_mib": None, "devices": []}
    raw = notes.get(annotation(container, PORTION))
    if raw is not None:
        try:
            decision["portion"] = float(raw)
        except ValueError:
            problems.append("%s=%r is not a number" % (annotation(container, PORTION), raw))
    for key, what in (("memory_request_mib", MEMORY_REQUEST), ("memory_limit_mib", MEMORY_LIMIT)):
        raw = notes.get(annotation(container, what))
        if raw is not None:
            try:
                decision[key] = quantity_mib(raw)
            except ValueError as exc:
                problems.append("%s: %s" % (annotation(container, what), exc))
    if decision["memory_limit_mib"] is None:
        decision["memory_limit_mib"] = decision["memory_request_mib"]
    raw = notes.get(annotation(container, DEVICES))
    if raw:
        decision["devices"] = [d.strip() for d in raw.split(",") if d.strip()]
    decision["problems"] = problems
    return decision


def parse_env(text):
    """`env` output (NAME=value lines) as a dict; lines without '=' are continuation
    lines of a multi-line value and are ignored."""
    found = {}
    for line in (text or "").splitlines():
        if "=" in line and re.match(r"[A-Za-z_][A-Za-z0-9_]*=", line):
            name, value = line.split("=", 1)
            found[name] = value
    return found


SMI_MEMORY_RE = re.compile(r"([0-9]+)\s*MiB")


def parse_smi_memory(text):
    """`nvidia-smi --query-gpu=memory.total --format=csv,noheader`: one line per
    visible GPU ("40960 MiB"); returns the list of MiB values."""
    values = []
    for line in (text or "").splitlines():
        line = line.strip()
        if not line:
            continue
        match = SMI_MEMORY_RE.fullmatch(line)
        if not match:
            raise ValueError("unexpected nvidia-smi line %r (expected like '40960 MiB')" % line)
        values.append(int(match.group(1)))
    if not values:
        raise ValueError("nvidia-smi printed no GPU")
    return values


DQ_DEVICE_RE = re.compile(r'^Device (\d+): "([^"]*)"', re.M)
DQ_SM_RE = re.compile(r"\((\d+)\) Multiprocessors, \((\d+)\) CUDA Cores/MP:\s+(\d+) CUDA Cores")
DQ_MEMORY_RE = re.compile(r"Total amount of global memory:\s+(\d+) MBytes \((\d+) bytes\)")
DQ_RESULT_RE = re.compile(r"^Result = (\w+)", re.M)


def parse_device_query(text):
    """CUDA's deviceQuery sample output: the first device's name, multiprocessors,
    cores per MP, global memory (MiB as printed) and the Result line."""
    text = text or ""
    result = DQ_RESULT_RE.search(text)
    device = DQ_DEVICE_RE.search(text)
    sms = DQ_SM_RE.search(text)
    if not result:
        raise ValueError("no 'Result = ...' line in the deviceQuery output")
    parsed = {"result": result.group(1), "device": device.group(2) if device else None,
              "multiprocessors": None, "cores_per_mp": None, "memory_mib": None}
    if sms:
        parsed["multiprocessors"] = int(sms.group(1))
        parsed["cores_per_mp"] = int(sms.group(2))
    memory = DQ_MEMORY_RE.search(text)
    if memory:
        parsed["memory_mib"] = int(memory.group(1))
    if parsed["result"] == "PASS" and parsed["multiprocessors"] is None:
        raise ValueError("deviceQuery passed but printed no '(N) Multiprocessors' line")
    return parsed


def parse_namespace_list(text):
    """The guide's `nvidia-cuda-mps-control -p 3 namespace list --server=shared`
    (the table form; mps.parse_namespace_table, format (unverified))."""
    return mps.parse_namespace_table(text)


def sm_count_for(product, override=None):
    """SMs of one GPU: the override, else the table by product name, else None."""
    if override:
        return int(override)
    if not product:
        return None
    name = product.replace("-", " ").upper()
    for key in sorted(SM_COUNTS, key=len, reverse=True):
        if key.replace("-", " ").upper() in name:
            return SM_COUNTS[key]
    return None


def namespace_name_of(pod, container=CONTAINER):
    """The MPS namespace the fork's mpsd makes for the pod's container (from its container ID), or None."""
    found = container_id(pod, container)
    return mps.fork_namespace_name(found) if found else None


def namespace_of(pod, namespaces, container=CONTAINER):
    """The MPS namespace row of a pod's container, or None."""
    wanted = namespace_name_of(pod, container)
    for row in namespaces:
        if wanted and row["namespace"] == wanted:
            return row
    return None


# ---------------------------------------------------------------- the checks
def result(check, node, passed, message, evidence, gpu=None, warnings=()):
    return {"check": check, "title": CHECK_TITLES[check], "node": node, "gpu": gpu, "passed": bool(passed),
            "message": message, "evidence": evidence, "warnings": list(warnings)}


# The guide's troubleshooting row (module_utils/troubleshooting.py, the page's source too).
MISMATCHED_FORKS = troubleshooting.message("forks_mismatched")


def check_binder(node, decisions, fraction):
    """Check 1 (the guide's pass condition): both pods show a non-empty
    gpu-compute.portion and gpu-memory.request and a real gpus.devices UUID.
    The scheduler bin-packs, so the UUIDs should match: different ones are a
    warning naming both; an empty one means a mismatched fork pair."""
    problems, warnings = [], []
    for d in decisions:
        problems.extend("%s: %s" % (d["pod"], p) for p in d["problems"])
        if d.get("scheduler", SCHEDULER) != SCHEDULER:
            problems.append("%s: placed by %s, not %s: gpu-fraction was ignored and the pod holds no share"
                            % (d["pod"], d["scheduler"], SCHEDULER))
        if d["portion"] is None:
            problems.append("%s: no %s annotation (is global.gpuSharingMode NvFractions?)" % (d["pod"], PORTION))
        elif abs(d["portion"] - fraction) > EPSILON:
            problems.append("%s: portion %g, asked %g" % (d["pod"], d["portion"], fraction))
        if d["memory_request_mib"] is None:
            problems.append("%s: no %s annotation" % (d["pod"], MEMORY_REQUEST))
        if not d["devices"]:
            received = d["annotations"].get(RECEIVED_RESOURCE_TYPE) or d.get("received_resource_type")
            why = " (%s: %s)" % (RECEIVED_RESOURCE_TYPE, received) if received else ""
            problems.append("%s: empty %s%s: %s" % (d["pod"], DEVICES, why, MISMATCHED_FORKS))
        elif len(d["devices"]) != 1:
            problems.append("%s: %s names %d GPUs (%s), expected 1" % (
                d["pod"], DEVICES, len(d["devices"]), ",".join(d["devices"])))
        elif not d["devices"][0].startswith(("GPU-", "MIG-")):
            problems.append("%s: %r is not a GPU UUID" % (d["pod"], d["devices"][0]))
    gpus = sorted(set(",".join(d["devices"]) for d in decisions if d["devices"]))
    nodes = sorted(set(str(d["node"]) for d in decisions))
    if len(nodes) > 1:
        problems.append("pods on different nodes: %s" % ", ".join(nodes))
    if len(gpus) > 1:
        warnings.append("the two pods are on different GPUs (%s): KAI bin-packs fractional pods by default, so "
                        "they should share one; a GPU may have been busy, or the scheduler's placement strategy "
                        "spreads" % ", ".join("%s on %s" % (d["pod"], ",".join(d["devices"])) for d in decisions))
    total = sum(d["portion"] or 0 for d in decisions if len(gpus) <= 1)
    if total > 1 + EPSILON:
        problems.append("portions add up to %g on one GPU (more than 1)" % total)
    evidence = {"pods": {d["pod"]: {"node": d["node"], "portion": d["portion"], "devices": d["devices"],
                                    "memory_request_mib": d["memory_request_mib"],
                                    "memory_limit_mib": d["memory_limit_mib"], "annotations": d["annotations"]}
                         for d in decisions}, "portion_total": total}
    message = "; ".join(problems) or "both pods on %s, %s, portions %s, memory %s MiB" % (
        nodes[0], " and ".join(gpus) or "?", " + ".join("%g" % (d["portion"] or 0) for d in decisions),
        " + ".join(str(d["memory_request_mib"]) for d in decisions))
    return result("binder", node, not problems, message, evidence, gpu=gpus[0] if len(gpus) == 1 else None,
                  warnings=warnings)


def memory_variable(env, what):
    """(the spelling fractiond used, its value) of a memory variable, or (None, None)."""
    for name in ENV_MEMORY_SPELLINGS[what]:
        if name in env:
            return name, env[name]
    return None, None


def check_injection(node, decisions, envs, fraction=None, gpu_memory_mib=None,
                    reserved_mib=DEFAULT_RESERVED_GPU_MEMORY_MIB):
    """Check 2 (the guide's pass condition): CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
    is the fraction x 100 and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT is 0=<N>M with
    N = (GPU memory MiB - 1024) x fraction; the memory variables (either
    spelling, reported), the pipe directory and the devices consistent with
    check 1."""
    problems, warnings, evidence = [], [], {}
    wanted_mib = expected_memory_mib(gpu_memory_mib, fraction, reserved_mib) \
        if gpu_memory_mib and fraction else None
    evidence["expected"] = {"gpu_memory_mib": gpu_memory_mib, "reserved_mib": reserved_mib, "memory_mib": wanted_mib}
    if gpu_memory_mib is None:
        warnings.append("the node has no %s label: the pinned limit is compared with the binder's decision, not "
                        "with the guide's formula" % GPU_MEMORY_LABEL)
    for d in decisions:
        env = envs.get(d["pod"]) or {}
        shown = dict((k, env[k]) for k in ENV_NAMES if k in env)
        evidence[d["pod"]] = shown
        who = d["pod"]
        if not any(k.startswith("CUDA_MPS_") for k in env):
            problems.append("%s: no CUDA_MPS_* variable at all: fractiond did not adjust the container (not "
                            "registered with NRI: its log lacks 'configured NRI plugin'; on MicroK8s or k3s set "
                            "the socket paths)" % who)
            continue
        for name in (ENV_PIPE, ENV_PERCENTAGE, ENV_PINNED, ENV_DEVICES):
            if name not in env:
                problems.append("%s: %s not injected" % (who, name))
        portion = d["portion"] if d["portion"] is not None else fraction
        if ENV_PERCENTAGE in env and portion is not None:
            accepted = accepted_percentages(portion)
            if env[ENV_PERCENTAGE].strip() not in [str(p) for p in accepted]:
                problems.append("%s: %s=%s, expected %s for portion %g" % (
                    who, ENV_PERCENTAGE, env[ENV_PERCENTAGE], " or ".join(str(p) for p in accepted), portion))
        cap = wanted_mib if wanted_mib is not None else d["memory_limit_mib"]
        if ENV_PINNED in env and cap is not None and env[ENV_PINNED].strip() != "0=%dM" % cap:
            how = ("(%s MiB - %s) x %g" % (gpu_memory_mib, reserved_mib, fraction) if wanted_mib is not None
                   else "the binder's memory cap")
            problems.append("%s: %s=%s, expected 0=%dM: %s" % (who, ENV_PINNED, env[ENV_PINNED], cap, how))
        if wanted_mib is not None and d["memory_limit_mib"] is not None and d["memory_limit_mib"] != wanted_mib:
            formula = "(%s MiB - %s) x %g" % (gpu_memory_mib, reserved_mib, fraction)
            problems.append("%s: the binder's memory cap is %s MiB, the guide's formula gives %s %s: is the binder's "
                            "reservedGpuMemory %s MiB?" % (who, d["memory_limit_mib"], wanted_mib, formula, reserved_mib))
        for what, key in ((ENV_MEMORY_LIMIT, "memory_limit_mib"), (ENV_MEMORY_REQUEST, "memory_request_mib")):
            name, value = memory_variable(env, what)
            evidence.setdefault("memory_variables", {}).setdefault(who, []).append(name)
            if name is None:
                problems.append("%s: neither %s nor %s injected" % ((who,) + ENV_MEMORY_SPELLINGS[what]))
            elif d[key] is not None and value.strip() != str(d[key]):
                problems.append("%s: %s=%s but the binder's %s is %d MiB" % (who, name, value, key[:-4].replace("_", " "),
                                                                             d[key]))
        devices = env.get(ENV_DEVICES, "").strip()
        if devices == VOID_DEVICES:
            problems.append("%s: %s=void: %s" % (who, ENV_DEVICES, MISMATCHED_FORKS))
        elif devices and d["devices"] and devices != ",".join(d["devices"]):
            problems.append("%s: %s=%s but the binder chose %s" % (who, ENV_DEVICES, devices, ",".join(d["devices"])))
        pipe = env.get(ENV_PIPE, "")
        if pipe.rstrip("/").endswith("/" + MPS_DEFAULT_NAMESPACE):
            problems.append("%s: %s=%s is the server's default namespace, not the pod's own" % (who, ENV_PIPE, pipe))
    spellings = sorted(set(n for names in evidence.get("memory_variables", {}).values() for n in names if n))
    message = "; ".join(problems) or "%s=%s and %s=%s in both pods (%s)" % (
        ENV_PERCENTAGE, expected_percentage(fraction) if fraction else "?", ENV_PINNED,
        "0=%sM" % (wanted_mib if wanted_mib is not None else "?"), ", ".join(spellings))
    return result("injection", node, not problems, message, evidence, gpu=_one_gpu(decisions), warnings=warnings)


def check_mps(node, decisions, pods, namespaces, command, default_percentage=MPS_DEFAULT_PERCENTAGE):
    """Check 3 (the guide's pass condition): the server lists the two pods'
    kai_* namespaces, found by their container IDs as the fork's mpsd names
    them, at the fraction's percentage (50.00), and `default` at the default
    cap (10.00). kai_* namespaces of deleted pods may linger about a minute
    before mpsd removes them: a warning, not a failure."""
    problems, warnings = [], []
    evidence = {"command": command, "namespaces": namespaces, "pods": {}}
    by_name = dict((p["metadata"]["name"], p) for p in pods)
    mine = set()
    for d in decisions:
        pod = by_name[d["pod"]]
        wanted = namespace_name_of(pod)
        if wanted is None:
            problems.append("%s: no container ID for container %s, so no MPS namespace to look for" % (
                d["pod"], CONTAINER))
            continue
        mine.add(wanted)
        row = namespace_of(pod, namespaces)
        if row is None:
            problems.append("%s: no MPS namespace %s (named from container ID %s) on the server" % (
                d["pod"], wanted, container_id(pod)))
            continue
        evidence["pods"][d["pod"]] = row
        if d["portion"] is not None:
            accepted = accepted_percentages(d["portion"])
            if not any(abs(row["active_thread_percentage"] - p) <= EPSILON for p in accepted):
                problems.append("%s: namespace %s at %.2f, expected %s" % (
                    d["pod"], row["namespace"], row["active_thread_percentage"],
                    " or ".join("%.2f" % p for p in accepted)))
    default = [r for r in namespaces if r["namespace"] == MPS_DEFAULT_NAMESPACE]
    if not default:
        problems.append("the server lists no %s namespace" % MPS_DEFAULT_NAMESPACE)
    elif abs(default[0]["active_thread_percentage"] - default_percentage) > EPSILON:
        problems.append("namespace %s at %.2f, expected %.2f: mpsd caps it as defence in depth for a pod handed the "
                        "server's pipe directory" % (MPS_DEFAULT_NAMESPACE, default[0]["active_thread_percentage"],
                                                     default_percentage))
    lingering = sorted(r["namespace"] for r in namespaces
                       if r["namespace"].startswith(mps.FORK_NAMESPACE_PREFIX) and r["namespace"] not in mine)
    if lingering:
        warnings.append("namespaces of other containers on the server: %s (those of deleted pods linger about a "
                        "minute before mpsd removes them)" % ", ".join(lingering))
    evidence["lingering"] = lingering
    message = "; ".join(problems) or "; ".join(["%s: %s at %.2f" % (k, v["namespace"], v["active_thread_percentage"])
                                                for k, v in sorted(evidence["pods"].items())]
                                               + ["%s at %.2f" % (MPS_DEFAULT_NAMESPACE,
                                                                  default[0]["active_thread_percentage"])])
    return result("mps", node, not problems, message, evidence, gpu=_one_gpu(decisions), warnings=warnings)


def check_memory(node, decisions, views):
    """Check 4: nvidia-smi in each pod, with a hostile thread percentage, sees its cap."""
    problems, evidence = [], {}
    for d in decisions:
        seen = views.get(d["pod"])
        evidence[d["pod"]] = {"memory_total_mib": seen, "cap_mib": d["memory_limit_mib"]}
        if seen is None:
            problems.append("%s: no answer from nvidia-smi" % d["pod"])
        elif d["memory_limit_mib"] is None:
            problems.append("%s: sees %d MiB but the binder wrote no memory cap" % (d["pod"], max(seen)))
        elif max(seen) != d["memory_limit_mib"]:
            problems.append("%s: sees %s MiB, its cap is %d MiB (memory not capped)" % (
                d["pod"], ",".join(str(v) for v in seen), d["memory_limit_mib"]))
    message = "; ".join(problems) or "; ".join("%s sees %s MiB" % (k, v["memory_total_mib"][0])
                                               for k, v in sorted(evidence.items()))
    return result("memory", node, not problems, message, evidence, gpu=_one_gpu(decisions))


def check_sm_share(node, fraction, parsed, sm_count, decision=None):
    """The SM-share measurement: deviceQuery asking 100 % sees floor(SMs x fraction)."""
    evidence = {"devicequery": parsed, "gpu_sm_count": sm_count, "fraction": fraction}
    gpu = ",".join(decision["devices"]) if decision and decision["devices"] else None
    if parsed is None:
        return result("sm_share", node, False, "deviceQuery produced no output", evidence, gpu)
    if parsed["result"] != "PASS":
        return result("sm_share", node, False, "deviceQuery: Result = %s" % parsed["result"], evidence, gpu)
    if sm_count is None:
        return result("sm_share", node, False, "unknown SM count of %r: set gpu_sm_count" % parsed["device"],
                      evidence, gpu)
    wanted = int(math.floor(sm_count * fraction + EPSILON))
    evidence["expected_multiprocessors"] = wanted
    seen = parsed["multiprocessors"]
    if seen != wanted:
        return result("sm_share", node, False, "deviceQuery sees %d multiprocessors, expected %d of %d (the cap is "
                      "not enforced)" % (seen, wanted, sm_count), evidence, gpu)
    return result("sm_share", node, True, "deviceQuery sees %d of %d multiprocessors despite %s=%s" % (
        seen, sm_count, ENV_PERCENTAGE, HOSTILE_PERCENTAGE), evidence, gpu)


def _one_gpu(decisions):
    gpus = set(",".join(d["devices"]) for d in decisions if d["devices"])
    return gpus.pop() if len(gpus) == 1 else None


# ---------------------------------------------------------------- the greedy neighbour
# The platform notes' "test what a greedy neighbour can do before you share a GPU
# between teams": two pods of the fraction on one GPU again, after the guide's two
# steps. One is greedy: the probe (module_utils/gpu_probe.py, run with python3 -c as
# the container's command) asks MPS for 100 % through its own
# CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, drops its own CUDA_MPS_PINNED_DEVICE_MEM_LIMIT,
# allocates 4/5 of its cap, tries its cap plus an eighth, and holds what it got. The
# other keeps to its share: the same probe, exec'd beside it, allocates 4/5 of its
# own cap. The guide: "The MPS server enforces the pod's SM share, and the driver
# enforces its memory cap, so the pod cannot raise either one."
GREEDY_PODS = ("fraction-greedy", "fraction-neighbour")
# Any image with python3 (and ctypes): the probe needs nothing else but the driver
# library the NVIDIA runtime mounts. The guide's nvidia/cuda base has no python3.
DEFAULT_GREEDY_IMAGE = "python:3.12-slim"
# The driver library is mounted only for the compute capability (set, not left to the image).
DRIVER_CAPABILITIES = ("NVIDIA_DRIVER_CAPABILITIES", "compute,utility")
PROBE_SOURCE = inspect.getsource(gpu_probe)
parse_probe = gpu_probe.parse
MEMORY_NOT_ENFORCED = (
    "nothing below the pod holds it to its memory cap. The fork's NvFractions path has the driver enforce "
    "it through the container toolkit's memory-limit hook (GPU Operator v26.7.1 or newer, toolkit v1.20.1 "
    "or newer); below that the cap rests on CUDA_MPS_PINNED_DEVICE_MEM_LIMIT alone, which the pod can "
    "change, and a NonMemoryEnforced sharing mode enforces no memory at all: upgrade the GPU Operator and "
    "keep gpuSharingMode NvFractions (the preflight's 'GPU memory enforcement' row says which one this "
    "cluster is), or do not share a GPU between teams that do not trust each other")
SM_NOT_ENFORCED = (
    "the MPS server does not hold a client to its namespace's active thread percentage (check 3 lists the "
    "caps the server was given, not the ones it applies): the pod's CUDA_MPS_PIPE_DIRECTORY must be its own "
    "namespace's (check 2) on mpsd's protocol-3 server (driver r615 or newer)")


def greedy_names(suffix=""):
    """The greedy pod's and its neighbour's names, with `-<suffix>` as pod_names."""
    tail = "-" + suffix if suffix else ""
    return [name + tail for name in GREEDY_PODS]


def probe_command(role, hold=None):
    """The probe as a command line (python3 -c <its source> ...)."""
    command = ["python3", "-c", PROBE_SOURCE, "--role", role]
    if hold:
        command += ["--hold", str(int(hold))]
    return command


def greedy_manifests(params, run):
    """[greedy pod, neighbour pod] for the module's parameters ([] unless greedy_neighbour).
    The greedy pod's command is the probe, which holds what it got until the module deletes
    it (at most its timeout plus five minutes, should the module be killed)."""
    if not params.get("greedy_neighbour"):
        return []
    greedy, neighbour = greedy_names(params.get("name_suffix") or "")
    common = dict(namespace=params["namespace"], queue=params["queue"], fraction=params["fraction"],
                  node=params.get("node"), run=run, scheduler=params.get("scheduler_name") or SCHEDULER,
                  runtime_class=params.get("runtime_class"), pull_secrets=params.get("image_pull_secrets") or (),
                  pull_policy=params.get("image_pull_policy"), image=params.get("greedy_image") or DEFAULT_GREEDY_IMAGE,
                  tolerate_unschedulable=bool(params.get("tolerate_unschedulable")))
    hold = int(params.get("timeout") or 180) + 300
    return [pod_manifest(greedy, command=probe_command("greedy", hold),
                         env=[(ENV_PERCENTAGE, HOSTILE_PERCENTAGE), DRIVER_CAPABILITIES], **common),
            pod_manifest(neighbour, command=["sleep", str(hold)], env=[DRIVER_CAPABILITIES], **common)]


def _allocation(result, what):
    return next((a for a in (result or {}).get("allocations") or [] if a.get("what") == what), None)


def _tail(text, limit=300):
    text = (text or "").strip()
    return ("..." + text[-limit:]) if len(text) > limit else (text or "no output")


def check_greedy(node, fraction, decisions, greedy, neighbour, sm_count, raw=None):
    """The greedy-neighbour check: the greedy pod, asking for 100 % and without its own
    pinned memory limit, sees only its SM share, gets 4/5 of its memory cap and is
    refused its cap plus an eighth with CUDA_ERROR_OUT_OF_MEMORY; beside it, the
    neighbour sees its share and gets 4/5 of its own cap. decisions: the two pods'
    binder_decision (greedy first); greedy, neighbour: their probes' results
    (gpu_probe.parse; None when none came); raw: {greedy, neighbour} outputs, quoted
    when a probe gave no result. Each failure names the enforcement that is missing."""
    raw = raw or {}
    problems, warnings = [], []
    wanted = int(math.floor(sm_count * fraction + EPSILON)) if sm_count else None
    evidence = {"greedy": greedy, "neighbour": neighbour, "gpu_sm_count": sm_count, "fraction": fraction,
                "expected_multiprocessors": wanted,
                "pods": dict((d["pod"], {"devices": d["devices"], "portion": d["portion"],
                                         "memory_limit_mib": d["memory_limit_mib"]}) for d in decisions)}
    names = [d["pod"] for d in decisions]
    gpus = [",".join(d["devices"]) for d in decisions]
    if not all(gpus):
        unbound = " and ".join(n for n, g in zip(names, gpus) if not g)
        problems.append("no GPU from the binder for %s: %s" % (unbound, MISMATCHED_FORKS))
    elif gpus[0] != gpus[1]:
        problems.append("the greedy pod (%s) and its neighbour (%s) were put on different GPUs, so it had no "
                        "neighbour to take from: KAI bin-packs fractional pods, a busy GPU or a spreading "
                        "placement strategy split them; run it again on an idle node" % tuple(gpus))
    if sm_count is None:
        problems.append("unknown SM count of %r: set gpu_sm_count" % ((greedy or neighbour or {}).get("device"),))
    held = (greedy or {}).get("held_mib") or 0
    for role, found, decision in (("greedy", greedy, decisions[0]), ("neighbour", neighbour, decisions[1])):
        who = "the greedy pod %s" % decision["pod"] if role == "greedy" else "its neighbour %s" % decision["pod"]
        if found is None:
            problems.append("%s: its probe gave no result (%s)" % (who, _tail(raw.get(role))))
            continue
        if found.get("multiprocessors") is None:
            problems.append("%s: the probe could not run: %s" % (who, found.get("error") or "no SM count"))
            continue
        seen = found["multiprocessors"]
        if wanted is not None and seen != wanted:
            if role == "greedy" and seen > wanted:
                problems.append("SM cap not enforced: %s asked %s=%s and sees %d of %d SMs, its share is %d: %s" % (
                    who, ENV_PERCENTAGE, HOSTILE_PERCENTAGE, seen, sm_count, wanted, SM_NOT_ENFORCED))
            elif role == "greedy":
                problems.append("%s sees %d of %d SMs, fewer than its share %d" % (who, seen, sm_count, wanted))
            else:
                problems.append("%s, which keeps to its share, sees %d of %d SMs beside the greedy pod, its share is "
                                "%d%s" % (who, seen, sm_count, wanted, (": " + SM_NOT_ENFORCED) if seen > wanted else ""))
        if found.get("error"):
            problems.append("%s: %s (fractiond injects the cap: check 2)" % (who, found["error"]))
            continue
        cap = found.get("cap_mib")
        if decision["memory_limit_mib"] is not None and cap is not None and cap != decision["memory_limit_mib"]:
            warnings.append("%s read a cap of %s MiB from %s, the binder's is %s MiB" % (
                who, cap, found.get("cap_from"), decision["memory_limit_mib"]))
        within, beyond = _allocation(found, "within"), _allocation(found, "beyond")
        if within is None or not within.get("ok"):
            if role == "greedy":
                problems.append("%s could not allocate %s MiB within its %s MiB cap (%s): the probe proves nothing "
                                "about the cap" % (who, (within or {}).get("mib"), cap, (within or {}).get("result")))
            else:
                problems.append("%s could not allocate %s MiB within its %s MiB cap while the greedy pod held %s MiB "
                                "(%s): the greedy pod took its memory: %s" % (
                                    who, (within or {}).get("mib"), cap, held, (within or {}).get("result"),
                                    MEMORY_NOT_ENFORCED))
        if role != "greedy":
            continue
        if beyond is None:
            problems.append("%s made no allocation beyond its cap" % who)
        elif beyond.get("ok"):
            problems.append("GPU memory cap not enforced: %s dropped its own %s and allocated %s MiB beyond its %s MiB "
                            "cap (holding %s MiB): %s" % (who, ENV_PINNED, beyond["mib"], cap, held,
                                                          MEMORY_NOT_ENFORCED))
        elif beyond.get("code") != gpu_probe.CUDA_ERROR_OUT_OF_MEMORY:
            problems.append("%s was refused %s MiB beyond its cap with %s, not CUDA_ERROR_OUT_OF_MEMORY: that is no "
                            "proof of a memory cap" % (who, beyond.get("mib"), beyond.get("result")))
    if problems:
        message = "; ".join(problems)
    else:
        refused = _allocation(greedy, "beyond")
        message = ("the greedy pod asked %s=%s and sees %d of %d SMs, allocated %d MiB within its %d MiB cap and was "
                   "refused %d MiB (%s); its neighbour sees %d SMs and allocated %d MiB beside it" % (
                       ENV_PERCENTAGE, HOSTILE_PERCENTAGE, greedy["multiprocessors"], sm_count,
                       _allocation(greedy, "within")["mib"], greedy["cap_mib"], refused["mib"], refused["result"],
                       neighbour["multiprocessors"], _allocation(neighbour, "within")["mib"]))
    return result(GREEDY_CHECK, node, not problems, message, evidence, gpu=_one_gpu(decisions), warnings=warnings)


def greedy_rows(node, decisions, greedy, neighbour):
    """The two pods' rows in the node's table (SMs seen; memory: what each one holds)."""
    rows = []
    for decision, found in zip(decisions, (greedy, neighbour)):
        found = found or {}
        rows.append({"node": node, "gpu": ",".join(decision["devices"]) or "-", "pod": decision["pod"],
                     "portion": decision["portion"], "memory_cap_mib": decision["memory_limit_mib"],
                     "injected_percentage": None, "mps_percentage": None,
                     "memory_seen_mib": found.get("held_mib"), "sms_seen": found.get("multiprocessors")})
    return rows


# ---------------------------------------------------------------- why pending
# Warnings that never explain a Pending pod (a cluster without DNS for pods).
NOISE = ("MissingClusterDNS",)


PULL_REASONS = ("ErrImagePull", "ImagePullBackOff")


def pull_failure(container_status, events):
    """{reason, said, tries} when the container waits on a failed image pull, else None.
    `events` are its pod's (events_of)."""
    waiting = ((container_status or {}).get("state") or {}).get("waiting") or {}
    if waiting.get("reason") not in PULL_REASONS:
        return None
    # The kubelet retries a failed pull (with back-off): one failure may be the
    # registry's hiccup; a second one is the image, the registry or the secret.
    pulls = [e for e in events if e.get("reason") == "Failed" and "pull" in (e.get("message") or "").lower()]
    # A back-off's own message says only that it waits: the registry's answer is in the
    # last "Failed to pull image" event (not found, 401 Unauthorized, 500 Internal Server
    # Error), not in the "Error: ImagePullBackOff" ones after it.
    answers = [e for e in pulls if (e.get("message") or "").startswith("Failed to pull")] or pulls
    last = (answers[-1].get("message") or "") if answers else ""
    said = waiting.get("message") or ""
    if last and last not in said:
        said = "%s; last failed pull: %s" % (said, last) if said else last
    return {"reason": waiting.get("reason"), "said": said, "tries": sum(int(e.get("count") or 1) for e in pulls)}


def _events_text(events):
    return ["%s: %s" % (e.get("reason"), e.get("message")) for e in events if e.get("reason") not in NOISE]


def _conditions(obj):
    return dict((c.get("type"), c) for c in (obj.get("status") or {}).get("conditions") or [])


def events_of(pod, events):
    """The events about this pod, not about an earlier pod of the same name (the
    smoke test reuses its pods' names, so a name alone brings back old causes)."""
    uid = (pod.get("metadata") or {}).get("uid")
    return [e for e in events if not uid or (e.get("involvedObject") or {}).get("uid") in (None, "", uid)]


def diagnose(pod, events=(), nodes=(), queues=None, podgroups=(), reservation_pods=(), reservation_events=(),
             runtime_classes=None):
    """Why `pod` is not Ready: a list of {cause, message}, most specific first,
    never empty. `queues` None means the Queue API was not readable;
    `runtime_classes` None means not read."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    labels = meta.get("labels") or {}
    causes = []

    def add(cause, message):
        causes.append({"cause": cause, "message": message})

    where = placement(pod, events)
    scheduler, node = where["scheduler_name"], where["node"]
    if scheduler != SCHEDULER and not node:
        add("scheduler_name", "spec.schedulerName is %r, not %r: KAI never sees the pod and the default scheduler "
            "ignores gpu-fraction" % (scheduler, SCHEDULER))
    queue = labels.get(QUEUE_LABEL)
    if not queue:
        extra = " (it has the old %s=%s label: rename it)" % (LEGACY_QUEUE_LABEL, labels[LEGACY_QUEUE_LABEL]) \
            if LEGACY_QUEUE_LABEL in labels else ""
        add("queue_label_missing", "no %s label%s: set it to a leaf queue, for example default-queue" % (
            QUEUE_LABEL, extra))
    elif queues is not None:
        names = dict((q["metadata"]["name"], q) for q in queues)
        children = sorted(n for n, q in names.items() if (q.get("spec") or {}).get("parentQueue") == queue)
        if queue not in names:
            add("queue_unknown", "%s=%s names no Queue (known: %s)" % (QUEUE_LABEL, queue, ", ".join(sorted(names))
                                                                       or "none"))
        elif children:
            add("queue_not_leaf", "queue %s has children (%s): only leaf queues run pods" % (
                queue, ", ".join(children)))
    wanted = (spec.get("nodeSelector") or {}).get(HOSTNAME_LABEL)
    tolerated = any(t.get("key") == UNSCHEDULABLE_TAINT or (not t.get("key") and t.get("operator") == "Exists")
                    for t in spec.get("tolerations") or [])
    cordoned = [n for n in nodes or () if n["metadata"]["name"] == wanted and (n.get("spec") or {}).get("unschedulable")]
    if cordoned and not tolerated and not node:
        add("node_cordoned", "node %s is cordoned (spec.unschedulable): no scheduler places a pod there unless it "
            "tolerates %s; uncordon it, or test it cordoned with tolerate_unschedulable" % (wanted, UNSCHEDULABLE_TAINT))
    gpu_nodes = [n["metadata"]["name"] for n in nodes
                 if _gpus(((n.get("status") or {}).get("allocatable") or {}).get("nvidia.com/gpu")) > 0]
    if nodes is not None and not gpu_nodes:
        add("no_gpu_nodes", "no node has allocatable nvidia.com/gpu: is the device plugin (GPU Operator) running?")

    loop = [e for e in reservation_events if e.get("reason") == "UnexpectedAdmissionError"]
    if loop:
        add("reservation_pod_loop", "KAI's reservation pods are re-created in a loop, rejected by the kubelet with "
            "UnexpectedAdmissionError (%s, %d times): the GPUs of the chosen node are already fully allocated; "
            "the binder retries forever" % (loop[-1].get("message"), sum(int(e.get("count") or 1) for e in loop)))
    problems = [_reservation_problem(p, reservation_events, runtime_classes) for p in reservation_pods]
    failed = [text for text, hard in filter(None, problems) if hard]
    slow = [text for text, hard in filter(None, problems) if not hard]
    if failed and not loop:
        add("reservation_pod_failed", "KAI's GPU reservation pod cannot run, so the binder never learns the GPU: %s"
            % "; ".join(failed))
    elif slow and not loop:
        # Only warnings (a volume not mounted yet, a sandbox retried): the kubelet retries these.
        add("reservation_pod_starting", "KAI's GPU reservation pod is not running yet: %s" % "; ".join(slow))

    for cause, message in _troubleshooting(events):
        add(cause, message)

    conditions = _conditions(pod)
    scheduled = conditions.get("PodScheduled", {})
    if node:
        for cs in status.get("containerStatuses") or []:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            terminated = (cs.get("state") or {}).get("terminated") or {}
            pull = pull_failure(cs, events)
            if pull:
                add("image_pull" if pull["tries"] >= 2 else "image_pull_retrying",
                    "container %s on %s: %s %s (failed pulls: %d): check the image name, that the node "
                    "reaches the registry and the pull secret" % (
                        cs.get("name"), node, pull["reason"], pull["said"], pull["tries"]))
            elif waiting.get("reason") and waiting.get("reason") != "ContainerCreating":
                add("container_waiting", "container %s on %s: %s %s" % (cs.get("name"), node,
                                                                        waiting.get("reason"),
                                                                        waiting.get("message") or ""))
            elif terminated:
                add("container_terminated", "container %s exited: %s (exit %s)" % (
                    cs.get("name"), terminated.get("reason"), terminated.get("exitCode")))
        if not causes:
            warnings = [e for e in events if e.get("type") == "Warning" and e.get("reason") not in NOISE]
            add("not_ready", "bound to %s but not Ready%s" % (
                node, ": " + "; ".join(_events_text(warnings[-3:])) if warnings else ""))
        return causes
    messages = []
    if scheduled.get("status") == "False" and scheduled.get("message"):
        messages.append(scheduled["message"])
    for group in podgroups:
        for cond in (group.get("status") or {}).get("schedulingConditions") or []:
            if cond.get("message"):
                messages.append("PodGroup %s: %s" % (group["metadata"]["name"], cond["message"]))
    messages.extend(e.get("message") for e in events if e.get("reason") in ("Unschedulable", "FailedScheduling")
                    and e.get("message"))
    seen, unique = set(), []
    for message in messages:
        if message not in seen:
            seen.add(message)
            unique.append(message)
    if unique:
        add("unschedulable", "the scheduler says: %s" % " | ".join(unique[-3:]))
    if not causes:
        if scheduler == SCHEDULER:
            add("no_scheduler_activity", "no event, condition or PodGroup from %s: is KAI Scheduler installed and its "
                "scheduler running (kubectl -n kai-scheduler get pods)?" % SCHEDULER)
        else:
            add("pending", "Pending with no reason recorded")
    return causes


# The guide's troubleshooting rows a pod's own events show: (cause, words in an
# event's message, what it means and what to do), from module_utils/troubleshooting.py
# (the troubleshooting page's source too).
TROUBLESHOOTING = troubleshooting.event_rows()


def _troubleshooting(events):
    found = []
    for cause, words, meaning in TROUBLESHOOTING:
        hits = [e for e in events if all(w in (e.get("message") or "") for w in words)]
        if hits:
            found.append((cause, "%s (%s: %s)" % (meaning, hits[-1].get("reason"), hits[-1].get("message"))))
    return found


def _gpus(value):
    try:
        return float(value or 0)
    except ValueError:
        return 0


def _reservation_problem(pod, events, runtime_classes):
    """(why one reservation pod is not giving the binder a GPU, whether its spec or status
    say so rather than only its events), or None."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    name = meta.get("name")
    if (meta.get("annotations") or {}).get(RESERVATION_GPU_ANNOTATION):
        return None
    mine = [e for e in events if (e.get("involvedObject") or {}).get("name") == name and e.get("type") == "Warning"
            and e.get("reason") not in NOISE]
    bits = []
    runtime = spec.get("runtimeClassName")
    if not runtime:
        bits.append(troubleshooting.message("reservation_pod_no_runtime_class"))
    elif runtime_classes is not None and runtime not in runtime_classes:
        bits.append("its RuntimeClass %r does not exist (the GPU Operator creates 'nvidia')" % runtime)
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        last = (cs.get("lastState") or {}).get("terminated") or {}
        if (state.get("waiting") or {}).get("reason") not in (None, "ContainerCreating"):
            bits.append("%s %s" % (state["waiting"]["reason"], state["waiting"].get("message") or ""))
        elif state.get("terminated"):
            bits.append("exited %s (%s)" % (state["terminated"].get("exitCode"), state["terminated"].get("reason")))
        elif last:
            bits.append("restarted %s times, last exit %s" % (cs.get("restartCount"), last.get("exitCode")))
    if status.get("phase") == "Failed":
        bits.append("phase Failed: %s" % (status.get("message") or status.get("reason") or ""))
    hard = bool(bits)   # what the pod's spec and status say; its events alone may be retried away
    bits.extend(_events_text(mine[-2:]))
    if not bits:
        return None
    return "%s/%s on %s: %s" % (meta.get("namespace"), name, spec.get("nodeName"),
                                "; ".join(b.strip() for b in bits)), hard


# ---------------------------------------------------------------- reports
def summary_rows(node, decisions, envs, namespaces_by_pod, views, device_query):
    rows = []
    for d in decisions:
        env = envs.get(d["pod"]) or {}
        ns = namespaces_by_pod.get(d["pod"]) or {}
        seen = views.get(d["pod"])
        rows.append({"node": node, "gpu": ",".join(d["devices"]) or "-", "pod": d["pod"],
                     "portion": d["portion"], "memory_cap_mib": d["memory_limit_mib"],
                     "injected_percentage": env.get(ENV_PERCENTAGE), "mps_percentage":
                     ns.get("active_thread_percentage"), "memory_seen_mib": seen[0] if seen else None,
                     "sms_seen": None})
    if device_query is not None:
        rows.append({"node": node, "gpu": device_query.get("gpu") or "-", "pod": device_query.get("pod"),
                     "portion": device_query.get("portion"), "memory_cap_mib": device_query.get("memory_cap_mib"),
                     "injected_percentage": None, "mps_percentage": None, "memory_seen_mib": None,
                     "sms_seen": (device_query.get("parsed") or {}).get("multiprocessors")})
    return rows


COLUMNS = (("node", "NODE"), ("gpu", "GPU"), ("pod", "POD"), ("portion", "PORTION"),
           ("memory_cap_mib", "MEM CAP MiB"), ("injected_percentage", "ENV %"), ("mps_percentage", "MPS %"),
           ("memory_seen_mib", "MEM SEEN MiB"), ("sms_seen", "SMs SEEN"))


def _cell(value):
    if value is None:
        return "-"
    if isinstance(value, float):
        return "%g" % value
    return str(value)


def table(rows):
    """The per-node/GPU table as text lines (a person reads it in the task output)."""
    cells = [[column[1] for column in COLUMNS]] + [[_cell(r.get(column[0])) for column in COLUMNS] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    return ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in cells]


def check_lines(checks):
    lines = []
    for c in checks:
        where = "[%s%s]" % (c["node"], " " + c["gpu"] if c.get("gpu") else "")
        lines.append("%s %s %s: %s" % ("PASS" if c["passed"] else "FAIL", c["title"], where, c["message"]))
        lines.extend("WARN %s %s: %s" % (c["title"], where, w) for w in c.get("warnings") or [])
    return lines


def markdown(runs):
    """A Markdown report of one or more runs (each a dict with node, rows, checks, pending)."""
    out = ["# GPU fraction smoke test", ""]
    for run in runs:
        ok = run.get("passed")
        out += ["## Node %s: %s" % (run.get("node") or "any", "passed" if ok else "FAILED"), ""]
        if run.get("rows"):
            out.append("| " + " | ".join(column[1] for column in COLUMNS) + " |")
            out.append("|" + "---|" * len(COLUMNS))
            for row in run["rows"]:
                out.append("| " + " | ".join(_cell(row.get(column[0])).replace("|", "\\|") for column in COLUMNS) + " |")
            out.append("")
        for c in run.get("checks") or []:
            out.append("- **%s** %s: %s" % ("PASS" if c["passed"] else "FAIL", c["title"],
                                            c["message"].replace("\n", " ")))
            out.extend("  - warning: %s" % w.replace("\n", " ") for w in c.get("warnings") or [])
        for p in run.get("pending") or []:
            out.append("- **PENDING** %s: %s" % (p["pod"], "; ".join(c["message"] for c in p["causes"])))
        out.append("")
    return "\n".join(out)


def junit(runs, suite="fraction_smoke_test"):
    """JUnit XML: one test case per check per node (a check that could not run is a failure)."""
    cases, failures = [], 0
    for run in runs:
        node = run.get("node") or "any"
        done = dict((c["check"], c) for c in run.get("checks") or [])
        for check in run.get("expected_checks") or CHECKS:
            c = done.get(check)
            head = '    <testcase classname=%s name=%s' % (quoteattr("%s.%s" % (suite, node)), quoteattr(check))
            if c is not None and c["passed"]:
                cases.append(head + "/>")
                continue
            failures += 1
            message = c["message"] if c is not None else (run.get("error") or "not run")
            cases.append(head + ">\n      <failure message=%s>%s</failure>\n    </testcase>" % (
                quoteattr(message), escape(message)))
    header = '<?xml version="1.0" encoding="UTF-8"?>\n<testsuites>\n  <testsuite name=%s tests="%d" failures="%d">' % (
        quoteattr(suite), len(cases), failures)
    return "\n".join([header] + cases + ["  </testsuite>", "</testsuites>", ""])
