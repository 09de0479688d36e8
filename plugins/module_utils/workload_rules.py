# -*- coding: utf-8 -*-
# Apache-2.0
"""The fractional-pod and queue rules of KAI Scheduler, checked on Kubernetes
manifests. Pure Python, one engine for the module smshare.kai.workload_lint
and the filter of the same name.

    findings = lint(objects, queues=inventory_queues)   # [Finding]
    report(findings)                                   # lines a person reads

Every finding names the object, the field (a path such as
spec.template.metadata.annotations[gpu-fraction]), the rule and what to do.
The kinds are those KAI's podgrouper groups (pkg/podgrouper/podgrouper/hub/hub.go
in kai-scheduler/KAI-Scheduler) that carry pod templates: the core workloads,
JobSet, the Kubeflow training jobs, RayCluster, RayJob and RayService,
LeaderWorkerSet, plus PodGroup and the
pods that join one by pod-group-name. lint() sees every object of a run at
once (a PodGroup and the pods that join it may sit in different files).
Rules and their sources: the KAI docs (gpu-sharing, batch, queues) and KAI's
own admission checks (gpu_request_validator.go) as read for the seed
documents, and for fraction-runs-as-root the published guide ("Build the
KAI-Scheduler and GPU Fractioning Forks", the smoke test's warning) and the
fork's mpsd (see the comment at RULES); see RULES for the list.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import io
import os
import re
import stat

from ansible.module_utils.six import string_types

from ansible_collections.smshare.kai.plugins.module_utils import queue_tree

SCHEDULER = "kai-scheduler"
QUEUE_LABEL = queue_tree.QUEUE_LABEL
LEGACY_QUEUE_LABEL = "runai/queue"
DEFAULT_QUEUE = "default-queue"
FRACTION = "gpu-fraction"
GPU_MEMORY = "gpu-memory"
NUM_DEVICES = "gpu-fraction-num-devices"
CONTAINER_NAME = "gpu-fraction-container-name"
MIN_MEMBER = "kai.scheduler/batch-min-member"
POD_GROUP = "pod-group-name"
SKIP_PODGROUPER = "kai.scheduler/skip-podgrouper"
GPU_RESOURCE = "nvidia.com/gpu"
# nvidia.com/container.<container>.<setting>: container names are DNS labels (no dots)
CONTAINER_ANNOTATION = re.compile(r"nvidia\.com/container\.([^.]+)\.(.+)")
RESERVED_SETTING = "gpus.devices"
FRACTION_SETTINGS = re.compile(r"gpu-memory\.(request|limit)|gpu-compute\..+")
POD_LEVEL = (FRACTION, GPU_MEMORY, NUM_DEVICES, CONTAINER_NAME, POD_GROUP)
QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?")
QUANTITY_FACTORS = {None: 1, "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50,
                    "Ei": 2 ** 60, "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12, "P": 10 ** 15,
                    "E": 10 ** 18}

ERROR = "error"
WARNING = "warning"

# rule -> (severity, what it checks): the README's table and the unit tests follow it.
RULES = {
    "parse": (ERROR, "the file is YAML or JSON Kubernetes objects"),
    "not-read": (ERROR, "the path is a regular file within the size limits, so it could be checked"),
    "scheduler-name": (ERROR, "KAI annotations or a queue label come with schedulerName: kai-scheduler"),
    "gpu-fraction-range": (ERROR, "gpu-fraction is a number with 0 < f < 1"),
    "gpu-memory-value": (ERROR, "gpu-memory is a positive whole number of MiB"),
    "fraction-and-memory": (ERROR, "gpu-fraction and gpu-memory are not both set"),
    "num-devices": (ERROR, "gpu-fraction-num-devices is a positive whole number, with a fraction or memory"),
    "fraction-with-whole-gpu": (ERROR, "a fractional pod does not also request a whole nvidia.com/gpu"),
    "one-fractional-container": (ERROR, "at most one container asks for a fraction"),
    "unknown-container": (ERROR, "annotations that name a container name one the pod has"),
    "nvfractions-quantity": (ERROR, "nvidia.com/container.<c>.gpu-memory.request/limit are quantities, "
                                    "request <= limit"),
    "reserved-annotation": (ERROR, "nvidia.com/container.<c>.gpus.devices is never set by users"),
    "annotation-placement": (ERROR, "pod annotations sit on the pod template, not on the workload"),
    "legacy-queue-label": (ERROR, "the queue label is kai.scheduler/queue, not runai/queue"),
    "queue-label-missing": (WARNING, "a KAI pod names its queue (else KAI uses default-queue)"),
    "queue-label-conflict": (WARNING, "the workload's and its pods' queue labels agree"),
    "queue-unknown": (ERROR, "the queue label names a queue of the tree"),
    "queue-not-leaf": (ERROR, "the queue label names a leaf queue"),
    "min-member-value": (ERROR, "kai.scheduler/batch-min-member is a positive whole number"),
    "min-member-too-large": (ERROR, "kai.scheduler/batch-min-member is not larger than the pods that can run "
                                    "at once"),
    # Source: the guide ("Build the KAI-Scheduler and GPU Fractioning Forks", the smoke test's warning: keep
    # runAsNonRoot: true, enforced by admission rather than left to each manifest) and the fork's mpsd
    # (github kai-scheduler/gpu-fractioning fractioning-manager/mpsd/internal/mpsns/manager.go
    # @ ad0bc5749e5a9acc21a153e265b00e913780af6c): the control daemon runs multi-user, so every MPS server is
    # owned by root, and control commands are taken from the server's owner or root only ("Insufficient
    # privileges for UID 60000. 'NAMESPACE SET' requires server owner."). A fractional pod running as root can
    # raise its own compute cap or delete a neighbour's namespace; a non-root one cannot.
    # Severity: an error when the manifest says root (an effective runAsUser: 0, or runAsNonRoot: false without
    # a non-zero runAsUser), a warning when it only leaves it open (runAsNonRoot unset, no non-zero runAsUser:
    # the image's USER decides, and the manifest does not show it).
    # Sources: KAI's podgrouper (pkg/podgrouper/podgrouper/plugins/kubeflow/distributed_common.go: the gang is
    # runPolicy.schedulingPolicy.minAvailable, else the sum of every replica spec's replicas, an error when a
    # required replica type is missing or a spec's replicas is 0 or unset; plugins/ray/ray_grouper.go: a worker
    # group's minReplicas above its replicas is an error), neither of which reads batch-min-member.
    "group-sizes": (ERROR, "the podgrouper can size the gang: a Kubeflow job has its required replica types and "
                           "replicas on each (or schedulingPolicy.minAvailable), a Ray worker group has "
                           "minReplicas <= replicas"),
    "min-member-ignored": (WARNING, "kai.scheduler/batch-min-member sits on a kind whose podgrouper reads it "
                                    "(Job, JobSet), not on a Kubeflow or Ray job"),
    # Sources: the PodGroup CRD (kai-scheduler/api config/crd/scheduling.run.ai_podgroups.yaml: minMember and
    # minSubGroup mutually exclusive, subGroups[].name and .parent DNS labels) and KAI's external-PodGroup design
    # (docs/developer/designs/external-podgroups/README.md: a pod joins by the pod-group-name annotation, the
    # annotation kai.scheduler/skip-podgrouper: "true" (that exact value) on the pod or an owner keeps the
    # podgrouper out, and the PodGroup's spec.queue is authoritative: the pods' queue labels are not used).
    "podgroup-spec": (ERROR, "a PodGroup's minMember and minSubGroup are whole numbers, not both set; its subGroups "
                             "have unique names, parents that exist, and parents size with minSubGroup"),
    "podgroup-queue-missing": (WARNING, "a PodGroup names its queue in spec.queue"),
    "pod-group-skip": (ERROR, "a workload's pod that joins a PodGroup by pod-group-name carries "
                              "kai.scheduler/skip-podgrouper: \"true\" (on the pod or its workload), so the "
                              "podgrouper leaves it there (an ownerless Pod needs none: the podgrouper skips it)"),
    "podgroup-members": (WARNING, "the pods the checked manifests add to a PodGroup reach its minMember"),
    # Sources: kai-config's gpuSharingMode (Disabled | NonMemoryEnforced (the chart's default) | HamiCore |
    # NvFractions, shared/REFERENCE.md); KAI's docs/gpu-sharing/README.md ("KAI Scheduler does not enforce memory
    # allocation limit" outside NvFractions); the fork's fractiond reads nvidia.com/container.<c>.gpu-memory.*
    # and gpu-compute.* (kai-gpu-fractioning fractioning-manager/fractiond/internal/annotations/annotations.go),
    # which only NvFractions installs. Checked when the run is given the mode (sharing_mode).
    "sharing-mode": (ERROR, "the cluster's GPU sharing mode serves the pod's share: no share when sharing is "
                            "Disabled (error); NvFractions annotations outside NvFractions and GPU memory under "
                            "NonMemoryEnforced are warnings (nothing enforces them)"),
    "fraction-runs-as-root": (ERROR, "a fractional pod cannot run as root: no container with runAsUser: 0, and the "
                                     "container with the share has runAsNonRoot: true or a non-zero runAsUser "
                                     "(an error for runAsUser: 0 or runAsNonRoot: false, a warning when "
                                     "runAsNonRoot is only unset)"),
}

# Per-rule metadata (read by module_utils/admission_policy.py and the unit tests, not by lint()).
# What a rule needs beyond the one object it judges. A rule not named here judges each object
# alone, so the admission policy checks it in CEL; the ones named here it cannot check, and the
# reason is what the admission_policy role's README says.
NEEDS = {
    "parse": "the manifest file: the API server parses the request itself",
    "not-read": "the manifest file and the run's read limits",
    "queue-unknown": "the queue tree (the cluster's Queue objects, or the inventory's list)",
    "queue-not-leaf": "the queue tree (the cluster's Queue objects, or the inventory's list)",
    "podgroup-members": "the other objects whose pods join the PodGroup",
    "sharing-mode": "the cluster's gpuSharingMode (kai-config, another object; or the inventory's knob)",
}
# Rules that report a warning as well as their RULES severity (the case decides which).
ALSO_WARNS = ("fraction-runs-as-root", "sharing-mode")


def severities(rule):
    """The severities a rule reports: its RULES severity, and warning for ALSO_WARNS."""
    found = [RULES[rule][0]]
    if rule in ALSO_WARNS and WARNING not in found:
        found.append(WARNING)
    return tuple(found)


# kind -> pod template paths (lists of keys) inside the object
TEMPLATES = {
    "Deployment": [("spec", "template")],
    "StatefulSet": [("spec", "template")],
    "DaemonSet": [("spec", "template")],
    "ReplicaSet": [("spec", "template")],
    "ReplicationController": [("spec", "template")],
    "Job": [("spec", "template")],
    "CronJob": [("spec", "jobTemplate", "spec", "template")],
}
# Kubeflow training jobs: kind -> (replica specs key under spec, replica types the podgrouper requires);
# KAI's plugins/kubeflow/{pytorch,tensorflow,xgboost,jax,mpi}.
KUBEFLOW = {
    "PyTorchJob": ("pytorchReplicaSpecs", ()),
    "TFJob": ("tfReplicaSpecs", ()),
    "XGBoostJob": ("xgbReplicaSpecs", ("Master", "Worker")),
    "JAXJob": ("jaxReplicaSpecs", ("Worker",)),
    "MPIJob": ("mpiReplicaSpecs", ("Launcher", "Worker")),
}
# Ray: kind -> the path of its cluster spec (a RayJob's podgrouper reads the RayCluster it makes from
# spec.rayClusterSpec; plugins/ray).
# A RayService's cluster is spec.rayClusterConfig (its podgrouper reads the RayCluster named in its status).
RAY = {"RayCluster": ("spec",), "RayJob": ("spec", "rayClusterSpec"), "RayService": ("spec", "rayClusterConfig")}
# LeaderWorkerSet (plugins/leaderworkerset): a leader and a worker template per group; its startupPolicy
# is one of these two, anything else the podgrouper refuses.
LWS_TEMPLATES = ("leaderTemplate", "workerTemplate")
LWS_STARTUP_POLICIES = ("LeaderCreated", "LeaderReady")
SHARING_MODES = ("Disabled", "NonMemoryEnforced", "HamiCore", "NvFractions")
# KAI's cluster-scoped Config (apiVersion, kind, name): spec.global.gpuSharingMode is one of SHARING_MODES.
KAI_CONFIG = ("kai.scheduler/v1", "Config", "kai-config")


class Finding:
    def __init__(self, rule, obj, field, message, source=None, severity=None):
        self.rule = rule
        self.severity = severity or RULES[rule][0]
        self.obj = obj
        self.field = field
        self.message = message
        self.source = source

    def as_dict(self):
        return {"rule": self.rule, "severity": self.severity, "object": self.obj, "field": self.field,
                "message": self.message, "source": self.source, "text": self.text()}

    def text(self):
        parts = [p for p in (self.source, self.obj, self.field) if p]
        return "%s: %s: %s [%s]" % (self.severity.upper(), ": ".join(parts), self.message, self.rule)

    def __repr__(self):
        return "Finding(%r, %r, %r)" % (self.rule, self.obj, self.field)


def _get(obj, *keys):
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _map(value):
    return value if isinstance(value, dict) else {}


def describe(obj):
    """Kind namespace/name, as a person would say it."""
    meta = _map(obj.get("metadata"))
    name = meta.get("name") or meta.get("generateName") or "<unnamed>"
    namespace = meta.get("namespace")
    return "%s %s" % (obj.get("kind") or "<no kind>", "%s/%s" % (namespace, name) if namespace else name)


class Template:
    """One pod template (or a Pod) and where it sits in its object."""

    def __init__(self, meta, spec, prefix):
        self.meta = _map(meta)
        self.spec = _map(spec)
        self.prefix = prefix  # "" for a Pod, "spec.template" for a Deployment...

    @property
    def annotations(self):
        return dict((str(k), v) for k, v in _map(self.meta.get("annotations")).items())

    @property
    def labels(self):
        return dict((str(k), v) for k, v in _map(self.meta.get("labels")).items())

    def path(self, *parts):
        base = "%s.metadata" % self.prefix if self.prefix else "metadata"
        return base + "".join(parts)

    def spec_path(self, *parts):
        base = "%s.spec" % self.prefix if self.prefix else "spec"
        return base + "".join(parts)

    def containers(self):
        """[(path, container)] of containers and init containers."""
        found = []
        for key in ("initContainers", "containers"):
            for index, container in enumerate(self.spec.get(key) or []):
                if isinstance(container, dict):
                    found.append((self.spec_path(".%s[%d]" % (key, index)), container))
        return found

    def container_names(self):
        return [pair[1].get("name") for pair in self.containers()]


def templates(obj):
    """Every pod template of a Kubernetes object (none for other kinds)."""
    kind = obj.get("kind")
    if kind == "Pod":
        return [Template(obj.get("metadata"), obj.get("spec"), "")]
    if kind in TEMPLATES:
        found = []
        for path in TEMPLATES[kind]:
            template = _get(obj, *path)
            if isinstance(template, dict):
                found.append(Template(template.get("metadata"), template.get("spec"), ".".join(path)))
        return found
    found = []
    if kind == "JobSet":
        for index, rjob in enumerate(_get(obj, "spec", "replicatedJobs") or []):
            found.append((_get(rjob, "template", "spec", "template"),
                          "spec.replicatedJobs[%d].template.spec.template" % index))
    elif kind in KUBEFLOW:
        key = KUBEFLOW[kind][0]
        for rtype, rspec in sorted(_map(_get(obj, "spec", key)).items()):
            found.append((_get(rspec, "template"), "spec.%s.%s.template" % (key, rtype)))
    elif kind == "LeaderWorkerSet":
        for key in LWS_TEMPLATES:
            found.append((_get(obj, "spec", "leaderWorkerTemplate", key), "spec.leaderWorkerTemplate." + key))
    elif kind in RAY:
        base = ".".join(RAY[kind])
        cluster = _map(_get(obj, *RAY[kind]))
        found.append((_get(cluster, "headGroupSpec", "template"), base + ".headGroupSpec.template"))
        for index, group in enumerate(cluster.get("workerGroupSpecs") or []):
            found.append((_get(group, "template"), "%s.workerGroupSpecs[%d].template" % (base, index)))
    return [Template(template.get("metadata"), template.get("spec"), prefix)
            for template, prefix in found if isinstance(template, dict)]


def _whole(value):
    """A positive whole number from an annotation string, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, string_types) and re.fullmatch(r"[0-9]+", value.strip()) and int(value) > 0:
        return int(value)
    return None


def _quantity(value):
    if not isinstance(value, string_types) or not QUANTITY.fullmatch(value):
        return None
    match = re.fullmatch(r"([0-9.]+)([A-Za-z]+)?", value)
    return float(match.group(1)) * QUANTITY_FACTORS[match.group(2)]


def uses_kai(template):
    """Why this template looks meant for KAI (annotations/labels), or []."""
    why = []
    for key in sorted(template.annotations):
        if key in POD_LEVEL or key.startswith("kai.scheduler/") or CONTAINER_ANNOTATION.fullmatch(key):
            why.append("annotation %s" % key)
    for key in sorted(template.labels):
        if key == QUEUE_LABEL or key.startswith("kai.scheduler/"):
            why.append("label %s" % key)
    return why


# ---------------------------------------------------------------- the rules
def fractional_containers(t):
    """{container name: [what gives it a GPU share]}: the container gpu-fraction or
    gpu-memory goes to (gpu-fraction-container-name, else the first container) and
    every container an NvFractions share annotation (nvidia.com/container.<c>.
    gpu-memory.request/limit, gpu-compute.*) names, present in the pod or not."""
    ann = t.annotations
    asking = {}
    if FRACTION in ann or GPU_MEMORY in ann:
        target = ann.get(CONTAINER_NAME)
        if target is None:
            first = (t.spec.get("containers") or [{}])[0]
            target = first.get("name") if isinstance(first, dict) else None
        if target is not None:
            asking.setdefault(target, []).append(FRACTION if FRACTION in ann else GPU_MEMORY)
    for key, container in nvfractions_shares(ann):
        asking.setdefault(container, []).append(key)
    return asking


def nvfractions_shares(annotations):
    """[(key, container)] of the NvFractions share annotations (nvidia.com/container.<c>.
    gpu-memory.request/limit, gpu-compute.*), in key order."""
    found = []
    for key in sorted(annotations):
        match = CONTAINER_ANNOTATION.fullmatch(key)
        if match and FRACTION_SETTINGS.fullmatch(match.group(2)):
            found.append((key, match.group(1)))
    return found


def is_fractional(t):
    """Whether the pod asks for a share of a GPU (gpu-fraction, gpu-memory or NvFractions)."""
    ann = t.annotations
    return FRACTION in ann or GPU_MEMORY in ann or bool(fractional_containers(t))


def _check_fraction_annotations(t, say):
    ann = t.annotations
    fraction, memory, devices = ann.get(FRACTION), ann.get(GPU_MEMORY), ann.get(NUM_DEVICES)
    if fraction is not None:
        try:
            number = float(str(fraction))
        except ValueError:
            number = None
        decimal = re.fullmatch(r"[0-9]*\.?[0-9]+([eE]-?[0-9]+)?", str(fraction).strip())
        if number is None or not 0 < number < 1 or not decimal:
            say("gpu-fraction-range", t.path(".annotations[%s]" % FRACTION),
                "%r must be a number greater than 0 and less than 1 (for example \"0.5\"); for whole GPUs "
                "request %s in the container's resources.limits instead" % (fraction, GPU_RESOURCE))
    if memory is not None and _whole(memory) is None:
        say("gpu-memory-value", t.path(".annotations[%s]" % GPU_MEMORY),
            "%r must be a positive whole number of MiB (for example \"4096\"), without a unit" % (memory,))
    if fraction is not None and memory is not None:
        say("fraction-and-memory", t.path(".annotations"),
            "sets both %s and %s: a pod asks for a share of a GPU one way, remove one of them"
            % (FRACTION, GPU_MEMORY))
    if devices is not None:
        if _whole(devices) is None:
            say("num-devices", t.path(".annotations[%s]" % NUM_DEVICES),
                "%r must be a positive whole number of GPUs (for example \"2\")" % (devices,))
        elif fraction is None and memory is None:
            say("num-devices", t.path(".annotations[%s]" % NUM_DEVICES),
                "spreads a share over %s devices but sets neither %s nor %s: add the share"
                % (devices, FRACTION, GPU_MEMORY))


def _check_containers(t, say):
    ann = t.annotations
    names = t.container_names()
    fractional = FRACTION in ann or GPU_MEMORY in ann
    if fractional:
        for path, container in t.containers():
            for section in ("limits", "requests"):
                if GPU_RESOURCE in _map(_map(container.get("resources")).get(section)):
                    say("fraction-with-whole-gpu", "%s.resources.%s[%s]" % (path, section, GPU_RESOURCE),
                        "container %r requests a whole %s in a pod that asks for a GPU share (%s): KAI refuses "
                        "the pod; drop the whole-GPU request or the share"
                        % (container.get("name"), GPU_RESOURCE, FRACTION if FRACTION in ann else GPU_MEMORY))
                    break
    asking = fractional_containers(t)
    if CONTAINER_NAME in ann and ann[CONTAINER_NAME] not in names:
        say("unknown-container", t.path(".annotations[%s]" % CONTAINER_NAME),
            "names container %r but the pod's containers are %s" % (ann[CONTAINER_NAME], _names(names)))
    requests = {}
    for key in sorted(ann):
        match = CONTAINER_ANNOTATION.fullmatch(key)
        if not match:
            continue
        container, setting = match.groups()
        where = t.path(".annotations[%s]" % key)
        if setting == RESERVED_SETTING:
            say("reserved-annotation", where,
                "is written by KAI's binder when it places the pod; users may not set it (admission rejects "
                "the pod): remove it")
            continue
        if container not in names:
            say("unknown-container", where,
                "names container %r but the pod's containers are %s: the setting applies to nothing"
                % (container, _names(names)))
        if setting in ("gpu-memory.request", "gpu-memory.limit"):
            amount = _quantity(ann[key])
            if amount is None or amount <= 0:
                say("nvfractions-quantity", where,
                    "%r must be a positive Kubernetes quantity of memory (for example 4096Mi)" % (ann[key],))
            else:
                requests.setdefault(container, {})[setting.split(".")[1]] = (amount, where, ann[key])
    for container, pair in sorted(requests.items()):
        if "request" in pair and "limit" in pair and pair["request"][0] > pair["limit"][0]:
            say("nvfractions-quantity", pair["limit"][1],
                "limit %s is below the request %s for container %r" % (
                    pair["limit"][2], pair["request"][2], container))
    if len(asking) > 1:
        say("one-fractional-container", t.path(".annotations"),
            "%d containers ask for a GPU share (%s): only one container of a pod may; keep the share on one "
            "and give the others none" % (len(asking), ", ".join(
                "%s via %s" % (c, ", ".join(asking[c])) for c in sorted(asking))))


ROOT_RISK = "MPS lets root raise its own cap or delete a neighbour's namespace"


def _uid(value):
    """A runAsUser as a number (0 included), else None (unset or not a uid)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, string_types) and re.fullmatch(r"[0-9]+", value.strip()):
        return int(value)
    return None


def _flag(value):
    """A runAsNonRoot as True/False, else None (unset)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, string_types) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return None


def _effective(t, path, container, key, parse):
    """(value, field) of securityContext.<key> for one container: its own wins over the pod's."""
    value = parse(_map(container.get("securityContext")).get(key))
    if value is not None:
        return value, "%s.securityContext.%s" % (path, key)
    value = parse(_map(t.spec.get("securityContext")).get(key))
    if value is not None:
        return value, t.spec_path(".securityContext.%s" % key)
    return None, None


def _containers_text(names):
    if names == [None]:
        return "the container that gets the share"
    quoted = [repr(n) for n in names]
    if len(quoted) == 1:
        return "container %s" % quoted[0]
    return "containers %s and %s" % (", ".join(quoted[:-1]), quoted[-1])


def _check_root(t, say):
    """fraction-runs-as-root, on any pod template the engine extracts. The kubelet
    runs a container as its effective runAsUser (the container's securityContext wins
    over the pod's); without one it runs the image's USER, which the manifest does
    not show: then only runAsNonRoot: true keeps root out (the kubelet refuses to
    start a container whose image runs as uid 0)."""
    if not is_fractional(t):
        return
    ann = t.annotations
    asking = fractional_containers(t)
    share = "; ".join("%s for container %r" % (", ".join(asking[c]), c) for c in sorted(asking)) \
        or (FRACTION if FRACTION in ann else GPU_MEMORY)
    pairs = t.containers()
    getting = [pair for pair in pairs if pair[1].get("name") in asking] or [(None, {})]
    found = {}  # field -> [situation, container names], in the order found
    as_root = set()
    for path, container in pairs:
        uid, where = _effective(t, path, container, "runAsUser", _uid)
        if uid == 0:
            found.setdefault(where, ["user", []])[1].append(container.get("name") or path)
            as_root.add(path)
    for path, container in getting:
        if path in as_root:
            continue
        uid, _where = _effective(t, path, container, "runAsUser", _uid)
        if uid:  # a non-zero uid: the kubelet runs it, never root
            continue
        nonroot, where = _effective(t, path, container, "runAsNonRoot", _flag)
        if nonroot:
            continue
        situation = "false" if nonroot is False else "unset"
        where = where or t.spec_path(".securityContext.runAsNonRoot")
        entry = found.setdefault(where, [situation, []])
        if container.get("name") not in entry[1]:
            entry[1].append(container.get("name"))
    for where, (situation, names) in found.items():
        who = _containers_text(names)
        in_pod = "in a pod that asks for a GPU share (%s): %s" % (share, ROOT_RISK)
        if situation == "user":
            say("fraction-runs-as-root", where,
                "is 0, so %s run%s as root %s: set a non-zero runAsUser and securityContext.runAsNonRoot: true"
                % (who, "s" if len(names) == 1 else "", in_pod))
        elif situation == "false":
            say("fraction-runs-as-root", where,
                "is false and no non-zero runAsUser is set, so %s may run as root %s: set "
                "securityContext.runAsNonRoot: true (and a non-zero runAsUser)" % (who, in_pod))
        else:
            say("fraction-runs-as-root", where,
                "is not set on the pod nor on %s, and no non-zero runAsUser is: the image's USER decides, which "
                "the manifest does not show, so it may run as root %s: set securityContext.runAsNonRoot: true "
                "(and a non-zero runAsUser)" % (who, in_pod), severity=WARNING)


def _names(names):
    return ", ".join(repr(n) for n in names) if names else "none"


def _check_scheduler(obj, t, why, say):
    scheduler = t.spec.get("schedulerName")
    if why and scheduler != SCHEDULER:
        say("scheduler-name", t.spec_path(".schedulerName"),
            "is %s but the pod uses KAI (%s): the default scheduler places it and ignores them; set "
            "schedulerName: %s" % (repr(scheduler) if scheduler else "unset",
                                   ", ".join(why[:3]) + (" and %d more" % (len(why) - 3) if len(why) > 3 else ""),
                                   SCHEDULER))


def _check_queue(obj, t, tree, say):
    top = dict((str(k), v) for k, v in _map(_map(obj.get("metadata")).get("labels")).items())
    pod_labels = t.labels
    if POD_GROUP in t.annotations:
        return      # its PodGroup's spec.queue decides (checked on the PodGroup)
    if LEGACY_QUEUE_LABEL in pod_labels or LEGACY_QUEUE_LABEL in top:
        if QUEUE_LABEL not in pod_labels and QUEUE_LABEL not in top:
            where = t.path(".labels[%s]" % LEGACY_QUEUE_LABEL) if LEGACY_QUEUE_LABEL in pod_labels \
                else "metadata.labels[%s]" % LEGACY_QUEUE_LABEL
            say("legacy-queue-label", where,
                "is the old Run:ai label; KAI reads %s: rename it" % QUEUE_LABEL)
    queue, where = None, None
    if t.prefix and QUEUE_LABEL in top:
        queue, where = top[QUEUE_LABEL], "metadata.labels[%s]" % QUEUE_LABEL
        if QUEUE_LABEL in pod_labels and pod_labels[QUEUE_LABEL] != queue:
            say("queue-label-conflict", t.path(".labels[%s]" % QUEUE_LABEL),
                "is %r but the %s's own label says %r, and KAI takes the workload's: make them agree"
                % (pod_labels[QUEUE_LABEL], obj.get("kind"), queue))
    elif QUEUE_LABEL in pod_labels:
        queue, where = pod_labels[QUEUE_LABEL], t.path(".labels[%s]" % QUEUE_LABEL)
    if queue is None:
        owned = any(isinstance(ref, dict) and ref.get("controller")
                    for ref in _map(obj.get("metadata")).get("ownerReferences") or [])
        if t.spec.get("schedulerName") != SCHEDULER or (not t.prefix and owned):
            return      # a controller's pod takes its queue from the top owner's label
        if tree is not None and (DEFAULT_QUEUE not in tree or queue_tree.children_of(tree).get(DEFAULT_QUEUE)):
            say("queue-not-leaf" if DEFAULT_QUEUE in tree else "queue-unknown", t.path(".labels"),
                "has no %s label, so KAI puts the pod in %r, which %s: label the pod with a leaf queue"
                % (QUEUE_LABEL, DEFAULT_QUEUE, "is not a leaf queue" if DEFAULT_QUEUE in tree
                   else "is not a queue of the tree"), severity=ERROR)
        else:
            say("queue-label-missing", t.path(".labels"),
                "has no %s label, so KAI puts the pod in %r: name the team's leaf queue"
                % (QUEUE_LABEL, DEFAULT_QUEUE))
        return
    if tree is not None:
        _check_queue_name(queue, where, tree, say)


def _check_placement(obj, say):
    if obj.get("kind") == "Pod" or not templates(obj):
        return
    annotations = _map(_map(obj.get("metadata")).get("annotations"))
    for key in sorted(annotations):
        if key in POD_LEVEL or CONTAINER_ANNOTATION.fullmatch(str(key)):
            say("annotation-placement", "metadata.annotations[%s]" % key,
                "is on the %s itself, where KAI does not read it: move it to the pod template's "
                "metadata.annotations (%s.metadata.annotations)" % (obj.get("kind"), templates(obj)[0].prefix))


def _check_gang(obj, say):
    kind = obj.get("kind")
    annotations = _map(_map(obj.get("metadata")).get("annotations"))
    if MIN_MEMBER in annotations:
        value = annotations[MIN_MEMBER]
        where = "metadata.annotations[%s]" % MIN_MEMBER
        wanted = _whole(value)
        if wanted is None:
            say("min-member-value", where, "%r must be a positive whole number of pods" % (value,))
        elif kind == "Job":
            _gang_fits(say, where, wanted, _get(obj, "spec", "parallelism"), _get(obj, "spec", "completions"),
                       "spec")
        elif kind in KUBEFLOW or kind in RAY or kind == "LeaderWorkerSet":
            say("min-member-ignored", where,
                "is not read by the %s podgrouper, which sizes the gang from %s: set that instead"
                % (kind, "spec.runPolicy.schedulingPolicy.minAvailable (else the sum of the replica specs' "
                   "replicas)" if kind in KUBEFLOW else "the worker groups' replicas and minReplicas"
                   if kind in RAY else "spec.replicas (and, with startupPolicy LeaderReady, the group size)"))
        elif kind == "JobSet":
            jobs = _get(obj, "spec", "replicatedJobs") or []
            if wanted > len(jobs):
                say("min-member-too-large", where,
                    "asks for %d replicated jobs together but the JobSet has %d: it would never start"
                    % (wanted, len(jobs)))
    if kind == "JobSet":
        for index, rjob in enumerate(_get(obj, "spec", "replicatedJobs") or []):
            value = _map(_get(rjob, "template", "metadata", "annotations")).get(MIN_MEMBER)
            if value is None:
                continue
            where = "spec.replicatedJobs[%d].template.metadata.annotations[%s]" % (index, MIN_MEMBER)
            wanted = _whole(value)
            if wanted is None:
                say("min-member-value", where, "%r must be a positive whole number of pods" % (value,))
                continue
            spec = _get(rjob, "template", "spec")
            _gang_fits(say, where, wanted, _get(spec, "parallelism"), _get(spec, "completions"),
                       "spec.replicatedJobs[%d].template.spec" % index)


def _at_once(parallelism, completions):
    """How many of a Job's pods run at once (parallelism, 1 when unset, capped by completions);
    None when the manifest's values are not whole numbers."""
    parallelism = 1 if parallelism is None else parallelism
    if _count(parallelism) is None or (completions is not None and _count(completions) is None):
        return None
    return parallelism if completions is None else min(parallelism, completions)


def _gang_fits(say, where, wanted, parallelism, completions, spec_path):
    at_once = _at_once(parallelism, completions)
    if at_once is None:
        return
    parallelism = 1 if parallelism is None else parallelism
    if wanted > at_once:
        why = "%s.parallelism is %d" % (spec_path, parallelism)
        if completions is not None and completions < parallelism:
            why = "%s.completions is %d" % (spec_path, completions)
        say("min-member-too-large", where,
            "asks for %d pods together but at most %d run at once (%s): the gang can never form and no pod "
            "starts; lower the annotation or raise the parallelism" % (wanted, at_once, why))


def _check_group_sizes(obj, say):
    kind = obj.get("kind")
    if kind in KUBEFLOW:
        key, required = KUBEFLOW[kind]
        specs = _map(_get(obj, "spec", key))
        min_available = _get(obj, "spec", "runPolicy", "schedulingPolicy", "minAvailable")
        if min_available is not None:
            where = "spec.runPolicy.schedulingPolicy.minAvailable"
            total = [_get(r, "replicas") for r in specs.values()]
            if _whole(min_available) is None:
                say("min-member-value", where, "%r must be a positive whole number of pods" % (min_available,))
            elif all(isinstance(n, int) and not isinstance(n, bool) for n in total) \
                    and min_available > sum(total):
                say("min-member-too-large", where,
                    "asks for %d pods together but the replica specs make %d: the gang can never form"
                    % (min_available, sum(total)))
            return
        for rtype in required:
            if rtype not in specs:
                say("group-sizes", "spec.%s" % key,
                    "has no %s replica spec, which the %s podgrouper requires (it has %s): the job gets no "
                    "PodGroup and never starts" % (rtype, kind, _names(sorted(specs))))
        for rtype, rspec in sorted(specs.items()):
            replicas = _get(rspec, "replicas")
            if not _count(replicas):      # unset, 0 or not a whole number
                say("group-sizes", "spec.%s.%s.replicas" % (key, rtype),
                    "is %s: the podgrouper sums every replica spec's replicas into the gang's size and refuses "
                    "a missing or zero one; set it (or spec.runPolicy.schedulingPolicy.minAvailable)"
                    % ("unset" if replicas is None else repr(replicas)))
    elif kind == "LeaderWorkerSet":
        policy = _get(obj, "spec", "startupPolicy")
        if policy is not None and policy not in LWS_STARTUP_POLICIES:
            say("group-sizes", "spec.startupPolicy",
                "is %r: the podgrouper knows only %s and refuses the set, so no pod starts"
                % (policy, " and ".join(LWS_STARTUP_POLICIES)))
    elif kind in RAY:
        base = ".".join(RAY[kind])
        for index, group in enumerate(_map(_get(obj, *RAY[kind])).get("workerGroupSpecs") or []):
            low, high = _get(group, "minReplicas"), _get(group, "replicas")
            if isinstance(low, int) and isinstance(high, int) and low > high:
                say("group-sizes", "%s.workerGroupSpecs[%d].minReplicas" % (base, index),
                    "is %d, above the group's replicas (%d): the podgrouper refuses the cluster and no pod "
                    "starts; lower it or raise replicas" % (low, high))


def _dns_label(value):
    return isinstance(value, string_types) and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", value) is not None


def _count(value):
    """A whole number >= 0 (PodGroup sizes may be 0), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _check_podgroup(obj, tree, say):
    spec = _map(obj.get("spec"))
    for key in ("minMember", "minSubGroup"):
        if key in spec and _count(spec[key]) is None:
            say("podgroup-spec", "spec.%s" % key, "%r must be a whole number of pods (0 or more)" % (spec[key],))
    if "minMember" in spec and "minSubGroup" in spec:
        say("podgroup-spec", "spec", "sets both minMember and minSubGroup, which the PodGroup API takes one at "
            "a time: size the group by its pods (minMember) or by its subgroups (minSubGroup)")
    groups = [g for g in spec.get("subGroups") or [] if isinstance(g, dict)]
    names = [g.get("name") for g in groups]
    parents = set(g.get("parent") for g in groups if g.get("parent") is not None)
    for index, group in enumerate(groups):
        where = "spec.subGroups[%d]" % index
        if not _dns_label(group.get("name")):
            say("podgroup-spec", where + ".name", "%r must be a DNS label (lowercase letters, digits, '-')"
                % (group.get("name"),))
        elif group.get("name") in names[:index]:
            say("podgroup-spec", where + ".name", "%r names two subgroups: each needs its own name"
                % group.get("name"))
        if group.get("parent") is not None and group.get("parent") not in names:
            say("podgroup-spec", where + ".parent", "%r is not a subgroup of this PodGroup (it has %s)"
                % (group.get("parent"), _names(names)))
        if group.get("name") in parents and "minMember" in group:
            say("podgroup-spec", where + ".minMember", "is set on %r, which is the parent of other subgroups: a "
                "parent is sized by minSubGroup (the API refuses minMember there)" % group.get("name"))
    queue = spec.get("queue")
    if not queue:
        say("podgroup-queue-missing", "spec.queue", "is unset: the PodGroup's queue decides for every pod that "
            "joins it (their own queue labels are not read); name the team's leaf queue")
    elif tree is not None:
        _check_queue_name(queue, "spec.queue", tree, say)


def _check_queue_name(queue, where, tree, say):
    if queue not in tree:
        say("queue-unknown", where, "names queue %r, which is not a queue of the tree (known: %s)"
            % (queue, ", ".join(sorted(tree)[:8]) + (" ..." if len(tree) > 8 else "")))
        return
    kids = queue_tree.children_of(tree).get(queue)
    if kids:
        say("queue-not-leaf", where, "names queue %r, which has child queues (%s): only leaf queues run jobs, "
            "so the pod would never be scheduled; use one of them" % (queue, ", ".join(kids)))


def _owners(obj, prefix):
    """(path, object) for obj and each object inside it on the way down to the pod template at
    prefix, the template included (a CronJob's jobTemplate, a JobSet's replicated job): where
    KAI looks for skip-podgrouper on the pod's owner chain (shouldSkipAnyOwner)."""
    chain, node, path = [("", obj)], obj, ""
    for key, index in re.findall(r"([^.\[\]]+)|\[([0-9]+)\]", prefix):
        if key:
            node, path = _map(node).get(key), (path + "." + key if path else key)
        else:
            node = node[int(index)] if isinstance(node, list) and int(index) < len(node) else None
            path += "[%s]" % index
        if isinstance(node, dict) and isinstance(node.get("metadata"), dict):
            chain.append((path, node))
    return chain


def _check_join(obj, t, say):
    """A pod joining a PodGroup of its own making must keep the podgrouper out."""
    group = t.annotations.get(POD_GROUP)
    meta = _map(obj.get("metadata"))
    if group is None or (not t.prefix and not meta.get("ownerReferences")):
        return      # the podgrouper leaves an ownerless pod with pod-group-name alone (pod_controller.go)
    marks = [((where + "." if where else "") + "metadata.annotations[%s]" % SKIP_PODGROUPER,
              _get(node, "metadata", "annotations", SKIP_PODGROUPER)) for where, node in _owners(obj, t.prefix)]
    if any(value == "true" for _where, value in marks):
        return
    set_to = [(where, value) for where, value in marks if value is not None]
    if set_to:
        where, value = set_to[0]
        say("pod-group-skip", where, "is %r: only the exact string \"true\" keeps the podgrouper out, so it "
            "would regroup the pod instead of leaving it in PodGroup %r" % (value, group))
    else:
        say("pod-group-skip", t.path(".annotations[%s]" % POD_GROUP),
            "joins PodGroup %r but neither the pod nor its %s carries %s: \"true\", so the podgrouper still "
            "groups the pod itself; add it" % (group, obj.get("kind") if t.prefix else "owner", SKIP_PODGROUPER))


def pods_of(obj):
    """How many pods a workload runs at once (None: not known from the manifest)."""
    kind, spec = obj.get("kind"), _map(obj.get("spec"))
    if kind == "Pod":
        return 1
    if kind in ("Deployment", "StatefulSet", "ReplicaSet", "ReplicationController"):
        replicas = spec.get("replicas", 1)
        return _count(replicas)
    if kind == "Job":
        return _at_once(spec.get("parallelism"), spec.get("completions"))
    return None


def _check_sharing_mode(t, mode, say):
    ann = t.annotations
    shared = [key for key in (FRACTION, GPU_MEMORY) if key in ann]
    nvfractions = [key for key, _container in nvfractions_shares(ann)]
    if mode == "Disabled" and (shared or nvfractions):
        say("sharing-mode", t.path(".annotations[%s]" % (shared + nvfractions)[0]),
            "asks for a share of a GPU but the cluster's gpuSharingMode is Disabled: KAI gives no shares, so the "
            "pod stays Pending; request a whole %s or enable a sharing mode" % GPU_RESOURCE)
        return
    if mode != "NvFractions" and nvfractions:
        say("sharing-mode", t.path(".annotations[%s]" % nvfractions[0]),
            "is read only when gpuSharingMode is NvFractions (the gpu-fractioning operator's fractiond); the "
            "cluster runs %s, where it sets nothing" % mode, severity=WARNING)
    if mode == "NonMemoryEnforced" and shared:
        say("sharing-mode", t.path(".annotations[%s]" % shared[0]),
            "is a scheduling figure only: gpuSharingMode NonMemoryEnforced enforces no GPU memory, so a "
            "neighbour on the same GPU may take more; NvFractions enforces it", severity=WARNING)


class Run:
    """One lint run: every object checked alone, then what spans objects (a PodGroup and
    the pods the run's manifests add to it). tree: {queue: parent} or None; sharing_mode:
    kai-config's gpuSharingMode or None (its rules are skipped)."""

    def __init__(self, tree=None, sharing_mode=None):
        if sharing_mode is not None and sharing_mode not in SHARING_MODES:
            raise ValueError("sharing_mode must be one of %s, got %r" % (", ".join(SHARING_MODES), sharing_mode))
        self.tree = tree
        self.sharing_mode = sharing_mode
        self.podgroups = {}     # (namespace, name) -> (describe, source, minMember)
        self.joins = {}         # (namespace, name) -> [(describe, pods or None)]

    def check(self, obj, source=None):
        if obj.get("kind") == "Pod" and ("status" in obj or _map(obj.get("metadata")).get("uid")):
            obj = live_view(obj)    # a dump of live pods (kubectl get -o yaml): judged as their author wrote them
        findings = []
        name = describe(obj)

        def say(rule, where, message, severity=None):
            findings.append(Finding(rule, name, where, message, source, severity))

        meta = _map(obj.get("metadata"))
        namespace = meta.get("namespace") or "default"
        if obj.get("kind") == "PodGroup":
            _check_podgroup(obj, self.tree, say)
            self.podgroups[(namespace, meta.get("name"))] = (name, source, _get(obj, "spec", "minMember"))
        _check_placement(obj, say)
        _check_gang(obj, say)
        _check_group_sizes(obj, say)
        workload_kai = ["annotation %s" % MIN_MEMBER] if MIN_MEMBER in _map(meta.get("annotations")) else []
        for t in templates(obj):
            why = uses_kai(t)
            if t.prefix:
                if QUEUE_LABEL in _map(meta.get("labels")):
                    why.append("the %s's label %s" % (obj.get("kind"), QUEUE_LABEL))
                why.extend(workload_kai)
            _check_scheduler(obj, t, why, say)
            _check_fraction_annotations(t, say)
            _check_containers(t, say)
            _check_queue(obj, t, self.tree, say)
            _check_join(obj, t, say)
            _check_root(t, say)
            if self.sharing_mode is not None:
                _check_sharing_mode(t, self.sharing_mode, say)
            group = t.annotations.get(POD_GROUP)
            if isinstance(group, string_types):
                self.joins.setdefault((namespace, group), []).append((name, pods_of(obj)))
        return findings

    def finish(self):
        """Findings over the whole run: a PodGroup the run's pods cannot fill."""
        findings = []
        for key, (name, source, wanted) in sorted(self.podgroups.items(), key=lambda item: str(item[0])):
            joins = self.joins.get(key, [])
            counts = [pods for _who, pods in joins]
            if _count(wanted) is None or not joins or None in counts or sum(counts) >= wanted:
                continue
            total = sum(counts)
            who = ", ".join("%s: %d" % pair for pair in joins)
            findings.append(Finding(
                "podgroup-members", name, "spec.minMember",
                "is %d but the manifests checked add %d pod%s to it (%s): unless pods from elsewhere join, the "
                "gang never forms and none of them starts" % (wanted, total, "" if total == 1 else "s", who), source))
        return findings


def lint_object(obj, tree=None, source=None, sharing_mode=None):
    """Findings for one Kubernetes object; tree is {queue: parent} or None."""
    run = Run(tree, sharing_mode)
    return run.check(obj, source) + run.finish()


def expand(objects, limits=None, source=None):
    """Flatten `kind: List` objects; drop empty documents. With limits: stop (_Stop, with
    its finding) past the run's object limit or the List nesting limit."""
    for obj in objects:
        yield from _flatten(obj, limits, source, 0)


def _flatten(obj, limits, source, depth):
    if limits is not None and depth > limits.list_depth:
        raise _Stop(Finding("not-read", None, None, "nests kind: List more than %d deep: the rest of the file was "
                            "not checked" % limits.list_depth, source))
    if isinstance(obj, dict) and obj.get("kind") == "List" and isinstance(obj.get("items"), list):
        for item in obj["items"]:
            yield from _flatten(item, limits, source, depth + 1)
    elif isinstance(obj, dict) and obj:
        if limits is not None:
            limits.objects_seen += 1
            if limits.objects_seen > limits.objects:
                raise _Stop(Finding("not-read", None, None, "the run reached its limit of %d objects: the rest was "
                                    "not checked" % limits.objects, source))
        yield obj


class _Stop(Exception):
    def __init__(self, finding):
        Exception.__init__(self, finding.message)
        self.finding = finding


def lint(objects, queues=None, source=None, sharing_mode=None):
    """Findings for a list of objects. queues: the inventory's queue list or
    Queue objects (None: the queue-tree rules are skipped); sharing_mode: the
    cluster's gpuSharingMode (None: its rules are skipped)."""
    run = Run(None if queues is None else queue_tree.names_and_parents(queues), sharing_mode)
    findings = []
    for obj in expand(objects or []):
        findings.extend(run.check(obj, source))
    return findings + run.finish()


# ---------------------------------------------------------------- live objects
def owned_by(obj, kinds):
    """Whether a controller of one of `kinds` owns obj (its template is checked instead)."""
    for ref in _map(obj.get("metadata")).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller") and ref.get("kind") in kinds:
            return True
    return False


def live_view(obj):
    """A live object as its author wrote it: no status, and on a pod none of what KAI
    wrote there: the binder's gpus.devices annotations on a bound pod, and the
    podgrouper's pod-group-name on a pod it grouped (one without skip-podgrouper: "true")."""
    view = dict(obj)
    view.pop("status", None)
    if obj.get("kind") != "Pod":
        return view
    meta = dict(_map(obj.get("metadata")))
    annotations = _map(meta.get("annotations"))
    bound = bool(_map(obj.get("spec")).get("nodeName"))
    grouped = annotations.get(SKIP_PODGROUPER) != "true"

    def written_by_kai(key):
        match = CONTAINER_ANNOTATION.fullmatch(str(key))
        return (bound and match is not None and match.group(2) == RESERVED_SETTING) or (grouped and key == POD_GROUP)

    meta["annotations"] = dict((k, v) for k, v in annotations.items() if not written_by_kai(k))
    view["metadata"] = meta
    return view


# ---------------------------------------------------------------- files
EXTENSIONS = (".yaml", ".yml", ".json")


class Limits:
    """What one run reads at most: a linter is pointed at repositories nobody
    vetted (a 50 MB manifest, an alias bomb of nested `kind: List`)."""

    def __init__(self, file_bytes=10 * 1024 * 1024, total_bytes=256 * 1024 * 1024, objects=50000, list_depth=16):
        self.file_bytes, self.total_bytes, self.objects, self.list_depth = file_bytes, total_bytes, objects, list_depth
        self.bytes_read = 0
        self.objects_seen = 0


def _regular(path):
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def manifest_files(paths, skipped=None):
    """Files to read, in a stable order: each file given, and every *.yaml,
    *.yml, *.json under each directory. A path that does not exist raises
    OSError; what is not a regular file (a FIFO, a socket, a broken link) is
    appended to `skipped` when given, never opened."""
    found = []
    for path in paths:
        if os.path.isdir(path):
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(f for f in files if f.endswith(EXTENSIONS)):
                    full = os.path.join(root, name)
                    if _regular(full):
                        found.append(full)
                    elif skipped is not None:
                        skipped.append(full)
        elif _regular(path):
            found.append(path)
        elif os.path.lexists(path):
            if skipped is None:
                raise OSError("%s: not a regular file" % path)
            skipped.append(path)
        else:
            raise OSError("%s: no such file or directory" % path)
    return found


def _read_text(path, limits):
    """(text, None) or (None, Finding) for one file within the limits."""
    size = os.stat(path).st_size
    if size > limits.file_bytes:
        return None, Finding("not-read", None, None, "is %d bytes, over the limit of %d per file: not checked"
                             % (size, limits.file_bytes), path)
    if limits.bytes_read + size > limits.total_bytes:
        return None, Finding("not-read", None, None, "not checked: the run reached its limit of %d bytes read"
                             % limits.total_bytes, path)
    with io.open(path, "rb") as handle:
        data = handle.read(limits.file_bytes + 1)
    limits.bytes_read += len(data)
    if len(data) > limits.file_bytes:
        return None, Finding("not-read", None, None, "grew over the limit of %d bytes per file while read: not "
                             "checked" % limits.file_bytes, path)
    if b"\0" in data:
        return None, Finding("parse", None, None, "is a binary file (a NUL byte at offset %d), not YAML or JSON"
                             % data.index(b"\0"), path)
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        return None, Finding("parse", None, None, "is not UTF-8 text (byte 0x%02x at offset %d): YAML and JSON "
                             "manifests are UTF-8" % (data[exc.start], exc.start), path)


def read_documents(path, loader, errors, limits=None):
    """[(source, object)] from one file, and a parse Finding instead when it is not YAML.
    loader: a function text -> documents (yaml.safe_load_all); errors: what it raises."""
    text, problem = _read_text(path, limits or Limits())
    if problem:
        return [], [problem]
    try:
        documents = list(loader(text))
    except errors as exc:  # the YAML library's errors carry line and column
        detail = " ".join(str(exc).split())
        return [], [Finding("parse", None, None, "is not valid YAML or JSON: %s" % detail, path)]
    except RecursionError:
        return [], [Finding("parse", None, None, "is nested too deeply to read", path)]
    found = []
    for index, document in enumerate(documents):
        if document is None:
            continue
        source = path if len(documents) == 1 else "%s#%d" % (path, index + 1)
        if not isinstance(document, dict):
            return found, [Finding("parse", None, None, "document %d is not a Kubernetes object (a mapping)"
                                   % (index + 1), path)]
        found.append((source, document))
    return found, []


def lint_files(paths, loader, errors, queues=None, limits=None, sharing_mode=None, run=None):
    """(findings, objects checked, files read) for files and directories.
    A file that cannot be read or parsed is a finding; the others are still checked.
    With run (a Run the caller finishes), the objects join the caller's run."""
    limits = limits or Limits()
    mine = run is None
    if mine:
        run = Run(None if queues is None else queue_tree.names_and_parents(queues), sharing_mode)
    skipped = []
    findings, count, files = [], 0, manifest_files(paths, skipped)
    findings.extend(Finding("not-read", None, None, "is not a regular file (a FIFO, socket, device or broken link): "
                            "not opened", path) for path in skipped)
    for path in files:
        try:
            documents, problems = read_documents(path, loader, errors, limits)
        except (IOError, OSError) as exc:
            documents, problems = [], [Finding("not-read", None, None, "cannot be read: %s" % (
                exc.strerror or exc), path)]
        findings.extend(problems)
        try:
            for source, document in documents:
                for obj in expand([document], limits, source):
                    count += 1
                    findings.extend(run.check(obj, source))
        except _Stop as stop:
            findings.append(stop.finding)
            if limits.objects_seen > limits.objects:
                break
    return findings + (run.finish() if mine else []), count, files


# ---------------------------------------------------------------- output
def summary(findings, checked):
    errors = len([f for f in findings if f.severity == ERROR])
    warnings = len(findings) - errors
    return "%d error%s, %d warning%s in %d object%s checked" % (
        errors, "" if errors == 1 else "s", warnings, "" if warnings == 1 else "s",
        checked, "" if checked == 1 else "s")


def report(findings):
    """One line per finding, errors first, then by source and object."""
    ordered = sorted(findings, key=lambda f: (f.severity != ERROR, f.source or "", f.obj or "", f.field or ""))
    return [f.text() for f in ordered]
