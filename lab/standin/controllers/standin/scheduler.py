"""STAND-IN (lab only): KAI Scheduler's scheduler and binder, for pods with
`schedulerName: kai-scheduler`.

Not KAI's algorithm (no fair share, preemption or topology): a small placer
that makes the decisions a pilot can observe the way KAI makes them.
- Queue: the top owner's `kai.scheduler/queue` label (a Job's), then the pod's,
  else `default-queue` (the podgrouper's rule). It must be an existing leaf
  Queue; each limit on the way up (-1 none; unset = 0 = nothing, as KAI reads
  it) caps what the queue's pods hold, in KAI's units (GPUs, millicores, MB).
- Gang: a Job's `kai.scheduler/batch-min-member` (default 1). No pod of the
  group is bound until that many (counting members already bound) fit at once.
- Fit: Ready nodes, schedulable or cordoned with the pod tolerating
  `node.kubernetes.io/unschedulable` (as kube-scheduler's NodeUnschedulable),
  whose taints the pod tolerates and whose labels
  match its nodeSelector (node affinity is not evaluated); cpu, memory, pods
  and whole `nvidia.com/gpu` against allocatable minus the pods bound there;
  `gpu-fraction` / `gpu-memory` (MiB, against the node label
  `nvidia.com/gpu.memory`) packed onto shared GPUs, each shared GPU counting as
  one whole GPU taken (as KAI's reservation pod makes it).
- Binder (fractional pods, as KAI's binder does): one GPU group per shared GPU
  (label `runai-gpu-group` on the pod) and its reservation pod in the
  reservation namespace (kai-config `spec.binder.resourceReservation`: name
  `gpu-reservation-<16 hex>`, labels `app: <appLabel>` and the group,
  `nvidia.com/gpu: 1`, the configured runtimeClassName, nodeName set); the
  reservation pod finds its GPU through NVML and writes the UUID in
  `run.ai/reserve_for_gpu_index`; the binder waits for it (knob
  `kai-binder.allocation-timeout`, seconds, default 60; on timeout the
  reservation pod is deleted and the pod stays Pending with "failed waiting for
  GPU reservation pod to allocate"), then writes, with gpuSharingMode
  NvFractions, `nvidia.com/container.<c>.gpu-compute.portion`,
  `.gpu-memory.request` ((`nvidia.com/gpu.memory` - reservedGpuMemory) x
  portion, `<n>Mi`, rounded down; reservedGpuMemory 1Gi, knob
  `kai-binder.reserved-gpu-memory-mib`) and `.gpus.devices` (the UUID), and
  `received-resource-type: Fraction`, and binds; `.gpu-memory.limit` only when
  the pod asks for one (`kai.scheduler/container.<c>.gpu-memory.portion.limit`).
  A node without the `nvidia.com/gpu.memory` label: the pod is not bound, an
  Event `BindingError` says so (KAI's NvFractions plugin, PreBind). Reservation pods whose group has no
  live pod left are deleted. Knob `kai-binder.split-gpus: "true"` puts every
  fractional pod on a GPU of its own (a broken binder, for the smoke test).
- Placed: pods/binding, then an Event `Scheduled` "Successfully assigned pod
  <ns>/<name> to node <node> at node-pool default" from component
  `kai-scheduler` (KAI's). A shared GPU is recorded on the pod as the lab
  annotation `standin.smshare.io/gpu-index`.
- Not placed: Event Warning `Unschedulable` and condition PodScheduled=False
  reason `Unschedulable`, once per distinct message.

Knobs (ConfigMap smshare-lab/standin-knobs, lab/standin/charts/CONTRACT.md):
`kai-scheduler.gang: "false"` places pods one by one, ignoring the gang rule
(a broken scheduler, for the pilot's failure test); `kai-scheduler.paused:
"true"` decides nothing. Readiness follows `kai-services.not-ready` as the
other services' does.

Runs in the stand-in `scheduler` image (`python3 -m standin kai-scheduler/scheduler`)
or on the lab host: `python3 -m standin kai-scheduler/scheduler` with
STANDIN_APISERVER, STANDIN_CA, STANDIN_CLIENT_CERT, STANDIN_CLIENT_KEY.
"""
import copy
import hashlib
import os
import re
import time

from .kube import ApiError, Kube, Stop, knobs, log, now, serve_health

SCHEDULER = "kai-scheduler"
QUEUE_LABEL = "kai.scheduler/queue"
DEFAULT_QUEUE = "default-queue"
MIN_MEMBER = "kai.scheduler/batch-min-member"
GPU = "nvidia.com/gpu"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
INDEX_ANNOTATION = "standin.smshare.io/gpu-index"
GPU_GROUP = "runai-gpu-group"
RESERVED_GPU = "run.ai/reserve_for_gpu_index"
KAI_CONFIG = "/apis/kai.scheduler/v1/configs/kai-config"
RESERVATION_DEFAULTS = {"namespace": "kai-resource-reservation", "serviceAccountName": "kai-resource-reservation",
                        "appLabel": "kai-resource-reservation"}
QUEUES = "/apis/scheduling.run.ai/v2/queues"
HEALTH_PORT = 8081
EPSILON = 1e-9
UNITS = {"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
         "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60}


def quantity(text):
    """A Kubernetes quantity as a float ("100m" -> 0.1, "1Gi" -> 1073741824)."""
    match = re.fullmatch(r"([+-]?[0-9.]+)(?:[eE]([+-]?[0-9]+))?([a-zA-Z]*)", str(text).strip())
    if not match or match.group(3) not in UNITS:
        return 0.0
    value = float(match.group(1)) * (10 ** int(match.group(2)) if match.group(2) else 1)
    return value * UNITS[match.group(3)]


def requests(pod):
    """{cpu (millicores), memory (bytes), gpu (whole), pods} a pod takes on its node."""
    spec = pod.get("spec") or {}

    def one(container):
        res = container.get("resources") or {}
        wanted = dict(res.get("limits") or {})
        wanted.update(res.get("requests") or {})
        return {"cpu": quantity(wanted.get("cpu", 0)) * 1000, "memory": quantity(wanted.get("memory", 0)),
                "gpu": quantity(wanted.get(GPU, 0))}
    total = {"cpu": 0.0, "memory": 0.0, "gpu": 0.0}
    for container in spec.get("containers") or []:
        for key, value in one(container).items():
            total[key] += value
    for container in spec.get("initContainers") or []:
        for key, value in one(container).items():
            total[key] = max(total[key], value)
    total["pods"] = 1
    return total


def share(pod, node):
    """(fraction of one GPU, number of devices) a fractional pod asks for, or (0, 0);
    raises ValueError with the reason when it cannot be placed on `node`."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    devices = int(annotations.get("gpu-fraction-num-devices", "1") or 1)
    if "gpu-fraction" in annotations:
        return float(annotations["gpu-fraction"]), devices
    if "gpu-memory" in annotations:
        total = (node["metadata"].get("labels") or {}).get(GPU_MEMORY_LABEL)
        if not total:
            raise ValueError("node %s has no %s label" % (node["metadata"]["name"], GPU_MEMORY_LABEL))
        return min(1.0, float(annotations["gpu-memory"]) / float(total)), devices
    return 0.0, 0


CORDON_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


def tolerates(pod, taint):
    for toleration in (pod.get("spec") or {}).get("tolerations") or []:
        if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
            continue
        if toleration.get("operator") == "Exists" and not toleration.get("key"):
            return True
        if toleration.get("key") != taint.get("key"):
            continue
        if toleration.get("operator") == "Exists" or toleration.get("value") == taint.get("value"):
            return True
    return False


class Cluster:
    """What the stand-in knows in one pass: nodes with what is left on them, queues, usage."""

    def __init__(self, kube, reservation_namespace="kai-resource-reservation", split=False):
        self.kube = kube
        self.split = split
        self.jobs = {}
        self.nodes = {}
        for node in kube.list("/api/v1/nodes"):
            conditions = {c["type"]: c["status"] for c in (node.get("status") or {}).get("conditions") or []}
            if conditions.get("Ready") != "True":
                continue
            alloc = (node.get("status") or {}).get("allocatable") or {}
            self.nodes[node["metadata"]["name"]] = {
                "node": node,
                "free": {"cpu": quantity(alloc.get("cpu", 0)) * 1000, "memory": quantity(alloc.get("memory", 0)),
                         "gpu": quantity(alloc.get(GPU, 0)), "pods": quantity(alloc.get("pods", 0))},
                "shared": {},   # gpu index -> share used
                "gpus": int(quantity(alloc.get(GPU, 0))),
            }
        self.queues = {q["metadata"]["name"]: q for q in self._queues()}
        self.usage = {}   # queue -> {gpu, cpu, memory} held by bound pods
        bound = kube.request("GET", "/api/v1/pods", query={
            "fieldSelector": "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"}).get("items", [])
        self.bound = bound
        for pod in bound:
            entry = self.nodes.get(pod["spec"]["nodeName"])
            wanted = requests(pod)
            if pod["metadata"].get("namespace") == reservation_namespace and \
                    GPU_GROUP in (pod["metadata"].get("labels") or {}):
                wanted["gpu"] = 0.0   # the shared GPU, counted through its fractional pods' index
            fraction = 0.0
            if entry is not None:
                for key in ("cpu", "memory", "gpu", "pods"):
                    entry["free"][key] -= wanted[key]
                index = ((pod["metadata"].get("annotations") or {}).get(INDEX_ANNOTATION))
                if index is not None:
                    try:
                        fraction = share(pod, entry["node"])[0]
                    except ValueError:
                        fraction = 1.0
                    for one in index.split(","):
                        if one not in entry["shared"]:
                            entry["free"]["gpu"] -= 1
                        entry["shared"][one] = entry["shared"].get(one, 0.0) + fraction
            if pod["spec"].get("schedulerName") == SCHEDULER:
                self.charge(self.queue_of(pod), wanted, fraction)

    def _queues(self):
        try:
            return self.kube.request("GET", QUEUES).get("items", [])
        except ApiError as exc:
            if exc.status == 404:
                return []
            raise

    def job_of(self, pod):
        for ref in (pod["metadata"].get("ownerReferences") or []):
            if ref.get("controller") and ref.get("kind") == "Job":
                key = (pod["metadata"]["namespace"], ref["name"])
                if key not in self.jobs:
                    self.jobs[key] = self.kube.get("/apis/batch/v1/namespaces/%s/jobs/%s" % key)
                return self.jobs[key]
        return None

    def queue_of(self, pod):
        job = self.job_of(pod)
        for labels in ((job or {}).get("metadata", {}).get("labels") or {},
                       pod["metadata"].get("labels") or {}):
            if QUEUE_LABEL in labels:
                return labels[QUEUE_LABEL]
        return DEFAULT_QUEUE

    def charge(self, queue, wanted, fraction, devices=1):
        used = self.usage.setdefault(queue, {"gpu": 0.0, "cpu": 0.0, "memory": 0.0})
        used["gpu"] += wanted["gpu"] + fraction * devices
        used["cpu"] += wanted["cpu"]
        used["memory"] += wanted["memory"] / 1e6

    def chain(self, queue):
        seen, names = set(), []
        while queue and queue in self.queues and queue not in seen:
            seen.add(queue)
            names.append(queue)
            queue = (self.queues[queue].get("spec") or {}).get("parentQueue")
        return names

    def subtree_usage(self, queue):
        total = {"gpu": 0.0, "cpu": 0.0, "memory": 0.0}
        for name, used in self.usage.items():
            if queue in self.chain(name):
                for key in total:
                    total[key] += used[key]
        return total

    def queue_problem(self, queue, asked):
        """Why the queue cannot take `asked` ({gpu, cpu, memory} in KAI's units), or None."""
        if queue not in self.queues:
            return "Queue %s does not exist" % queue
        children = [n for n, q in self.queues.items() if (q.get("spec") or {}).get("parentQueue") == queue]
        if children:
            return "Queue %s is not a leaf queue (children: %s); only leaf queues can run jobs" % (
                queue, ", ".join(sorted(children)))
        names = {"gpu": ("GPUs", "GPUs"), "cpu": ("CPU cores", "cores"), "memory": ("memory", "GB")}
        scale = {"gpu": 1, "cpu": 1000, "memory": 1000}
        for name in self.chain(queue):
            resources = (self.queues[name].get("spec") or {}).get("resources") or {}
            used = self.subtree_usage(name)
            for key in ("gpu", "cpu", "memory"):
                if not asked[key]:
                    continue
                limit = float((resources.get(key) or {}).get("limit", 0) or 0)
                if limit == -1:
                    continue
                if used[key] + asked[key] > limit + EPSILON:
                    what, unit = names[key]
                    return ("%s quota has reached the allowable limit of %s. Limit is %g %s, currently %g %s "
                            "allocated and workload requested %g %s" % (
                                name, what, limit / scale[key], unit, used[key] / scale[key], unit,
                                asked[key] / scale[key], unit))
        return None


def fits(cluster, pod, wanted):
    """(node name, gpu indices for a share) where the pod fits now, or (None, reason)."""
    reasons = []
    for name in sorted(cluster.nodes):
        entry = cluster.nodes[name]
        node = entry["node"]
        labels = node["metadata"].get("labels") or {}
        selector = (pod.get("spec") or {}).get("nodeSelector") or {}
        if any(labels.get(k) != v for k, v in selector.items()):
            reasons.append("%s: node selector" % name)
            continue
        if (node.get("spec") or {}).get("unschedulable") and not tolerates(pod, CORDON_TAINT):
            reasons.append("%s: node(s) were unschedulable" % name)
            continue
        taints = [t for t in (node.get("spec") or {}).get("taints") or []
                  if t.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(pod, t)]
        if taints:
            reasons.append("%s: taint %s" % (name, taints[0].get("key")))
            continue
        short = [k for k in ("cpu", "memory", "pods", "gpu") if wanted[k] > entry["free"][k] + EPSILON]
        if short:
            reasons.append("%s: not enough %s" % (name, ", ".join(GPU if k == "gpu" else k for k in short)))
            continue
        try:
            fraction, devices = share(pod, node)
        except ValueError as exc:
            reasons.append(str(exc))
            continue
        if not fraction:
            return name, []
        indices = [i for i in sorted(entry["shared"], key=int) if entry["shared"][i] + fraction <= 1 + EPSILON
                   and not cluster.split]
        indices = indices[:devices]
        opened = 0
        free_whole = entry["free"]["gpu"] - wanted["gpu"]
        candidates = [str(i) for i in range(entry["gpus"]) if str(i) not in entry["shared"]]
        while len(indices) < devices and opened < free_whole and candidates:
            indices.append(candidates.pop(0))
            opened += 1
        if len(indices) < devices:
            reasons.append("%s: no GPU with %g free" % (name, 1 - fraction))
            continue
        return name, indices
    return None, "; ".join(reasons) or "no ready, schedulable node"


def take(cluster, pod, name, indices, wanted):
    entry = cluster.nodes[name]
    for key in ("cpu", "memory", "pods", "gpu"):
        entry["free"][key] -= wanted[key]
    fraction = 0.0
    if indices:
        fraction = share(pod, entry["node"])[0]
        for index in indices:
            if index not in entry["shared"]:
                entry["free"]["gpu"] -= 1
            entry["shared"][index] = entry["shared"].get(index, 0.0) + fraction
    return fraction


class Scheduler:
    def __init__(self, kube):
        self.kube = kube
        self.said = {}   # pod uid -> last message

    def event(self, pod, kind, reason, message):
        meta = pod["metadata"]
        stamp = now()
        self.kube.create("/api/v1/namespaces/%s/events" % meta["namespace"], {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": meta["name"] + ".", "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": meta["namespace"],
                               "name": meta["name"], "uid": meta["uid"]},
            "reason": reason, "message": message, "type": kind,
            "source": {"component": SCHEDULER}, "reportingComponent": SCHEDULER,
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1})

    def unschedulable(self, pod, message):
        uid = pod["metadata"]["uid"]
        if self.said.get(uid) == message:
            return
        self.said[uid] = message
        meta = pod["metadata"]
        self.kube.strategic_patch("/api/v1/namespaces/%s/pods/%s/status" % (meta["namespace"], meta["name"]), {
            "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                       "message": message, "lastTransitionTime": now()}]}})
        self.event(pod, "Warning", "Unschedulable", message)
        log("pod not placed", pod="%s/%s" % (meta["namespace"], meta["name"]), reason=message)

    def config(self):
        """kai-config, or None (no KAI operator's config: bind without reservation pods)."""
        try:
            return self.kube.get(KAI_CONFIG)
        except ApiError:
            return None

    def reservation(self, config):
        found = dict(RESERVATION_DEFAULTS)
        found.update((((config or {}).get("spec") or {}).get("binder") or {}).get("resourceReservation") or {})
        return found

    def reserve(self, pod, node, index, settings, config):
        """The reserved GPU's UUID (KAI's reservation pod), or raise ValueError with the binder's message."""
        res = self.reservation(config)
        group = "%s-gpu%s" % (node, index)
        name = "gpu-reservation-" + hashlib.sha256(("%s/%s" % (node, group)).encode()).hexdigest()[:16]
        path = "/api/v1/namespaces/%s/pods/%s" % (res["namespace"], name)
        deadline = time.time() + float(settings.get("kai-binder.allocation-timeout", "60") or 60)
        while True:
            try:
                found = self.kube.get(path)
            except ApiError as exc:
                if exc.status != 404:
                    raise
                found = None
            # a reservation pod on its way out is not reused: wait for it to go
            if found is None or not found["metadata"].get("deletionTimestamp") or time.time() > deadline:
                break
            time.sleep(0.5)
        if found is None:
            image = res.get("image") or {}
            spec = {"nodeName": node, "serviceAccountName": res["serviceAccountName"], "containers": [{
                "name": "resource-reservation",
                "image": "%s/%s:%s" % (image.get("repository"), image.get("name", "resourcereservation"),
                                       image.get("tag")),
                "imagePullPolicy": image.get("pullPolicy") or "IfNotPresent",
                "resources": {"limits": {GPU: "1"}, "requests": {GPU: "1"}},
                "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]}]}
            if res.get("runtimeClassName"):
                spec["runtimeClassName"] = res["runtimeClassName"]
            self.kube.create("/api/v1/namespaces/%s/pods" % res["namespace"], {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": res["namespace"],
                             "labels": {"app": res["appLabel"], GPU_GROUP: group},
                             "annotations": {INDEX_ANNOTATION: str(index), "karpenter.sh/do-not-disrupt": "true"}},
                "spec": spec})
            log("Successfully created GPU resource reservation pod", node=node, name=name, gpuGroup=group)
        deadline = time.time() + float(settings.get("kai-binder.allocation-timeout", "60") or 60)
        while time.time() < deadline:   # the reservation pod finds its GPU
            try:
                current = self.kube.get(path)
            except ApiError:
                current = None
            uuid = ((current or {}).get("metadata", {}).get("annotations") or {}).get(RESERVED_GPU)
            if uuid:
                return group, uuid
            time.sleep(0.5)
        try:
            self.kube.delete(path)
        except ApiError:
            pass
        raise ValueError("failed waiting for GPU reservation pod to allocate: %s/%s" % (res["namespace"], name))

    def release_unused(self, config):
        """Delete reservation pods whose GPU group no live pod holds any more (KAI's sync)."""
        res = self.reservation(config)
        held = self.kube.request("GET", "/api/v1/pods", query={"labelSelector": GPU_GROUP}).get("items", [])
        live = {p["metadata"]["labels"][GPU_GROUP] for p in held
                if p["metadata"]["namespace"] != res["namespace"] and not p["metadata"].get("deletionTimestamp")
                and (p.get("status") or {}).get("phase") in ("Pending", "Running", None)}
        for pod in held:
            meta = pod["metadata"]
            if meta["namespace"] == res["namespace"] and meta["labels"][GPU_GROUP] not in live \
                    and not meta.get("deletionTimestamp"):
                log("Did not find fraction pod for gpu group, deleting reservation pod", gpuGroup=meta["labels"][GPU_GROUP])
                try:
                    self.kube.delete("/api/v1/namespaces/%s/pods/%s" % (meta["namespace"], meta["name"]))
                except ApiError:
                    pass

    def binding_error(self, pod, node, why):
        """What KAI's BindRequest controller reports when a binder plugin's PreBind fails."""
        meta = pod["metadata"]
        message = ("Failed to bind pod %s/%s to node %s: plugin nvfractions failed in PreBind: %s"
                   % (meta["namespace"], meta["name"], node, why))
        if self.said.get(meta["uid"]) != message:
            self.said[meta["uid"]] = message
            self.event(pod, "Warning", "BindingError", message)
            log("binding failed", pod="%s/%s" % (meta["namespace"], meta["name"]), error=message)

    def bind(self, pod, node, indices, node_obj=None, settings=None, config=None):
        meta = pod["metadata"]
        path = "/api/v1/namespaces/%s/pods/%s" % (meta["namespace"], meta["name"])
        mode = (((config or {}).get("spec") or {}).get("global") or {}).get("gpuSharingMode")
        total = float(((node_obj or {}).get("metadata", {}).get("labels") or {}).get(GPU_MEMORY_LABEL) or 0)
        if indices and config is not None and mode == "NvFractions" and not total:
            self.binding_error(pod, node, "failed to set NvFractions memory annotation: node does not include %s "
                               "label" % GPU_MEMORY_LABEL)
            return False
        if indices:
            notes = {INDEX_ANNOTATION: ",".join(indices)}
            labels = {}
            if config is not None:
                try:
                    groups = [self.reserve(pod, node, index, settings or {}, config) for index in indices]
                except ValueError as exc:
                    self.unschedulable(pod, str(exc))
                    return False
                labels[GPU_GROUP] = groups[0][0]
                source = meta.get("annotations") or {}
                if mode == "NvFractions" and "gpu-fraction" in source:
                    container = source.get("gpu-fraction-container-name") or pod["spec"]["containers"][0]["name"]
                    fraction = float(source["gpu-fraction"])
                    reserved = float((settings or {}).get("kai-binder.reserved-gpu-memory-mib", "1024") or 1024)
                    key = "nvidia.com/container.%s." % container
                    notes[key + "gpu-compute.portion"] = source["gpu-fraction"]
                    if key + "gpu-memory.request" not in source:
                        notes[key + "gpu-memory.request"] = "%dMi" % int((total - reserved) * fraction + 1e-6)
                    limit = source.get("kai.scheduler/container.%s.gpu-memory.portion.limit" % container)
                    if limit:
                        notes[key + "gpu-memory.limit"] = "%dMi" % int((total - reserved) * float(limit) + 1e-6)
                    notes[key + "gpus.devices"] = ",".join(g[1] for g in groups)
                    notes["received-resource-type"] = "Fraction"
            self.kube.merge_patch(path, {"metadata": {"annotations": notes, "labels": labels}})
        self.kube.create(path + "/binding", {
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
        self.event(pod, "Normal", "Scheduled", "Successfully assigned pod %s/%s to node %s at node-pool default"
                   % (meta["namespace"], meta["name"], node))
        self.said.pop(meta["uid"], None)
        log("pod placed", pod="%s/%s" % (meta["namespace"], meta["name"]), node=node, gpus=",".join(indices))
        return True

    def groups(self, cluster, pending, gang):
        """[(minimum to place now, [pods])], oldest first."""
        found = {}
        for pod in pending:
            job = cluster.job_of(pod) if gang else None
            key = ("job", job["metadata"]["uid"]) if job else ("pod", pod["metadata"]["uid"])
            found.setdefault(key, {"job": job, "pods": []})["pods"].append(pod)
        ordered = []
        for key, group in found.items():
            minimum = 1
            job = group["job"]
            if job:
                raw = ((job["metadata"].get("annotations") or {}).get(MIN_MEMBER) or "1").strip()
                minimum = int(raw) if raw.isdigit() and int(raw) > 0 else 1
                running = len([p for p in cluster.bound if any(
                    r.get("uid") == job["metadata"]["uid"] for r in p["metadata"].get("ownerReferences") or [])])
                minimum = max(1, minimum - running)
            pods = sorted(group["pods"], key=lambda p: (p["metadata"].get("creationTimestamp", ""),
                                                        p["metadata"]["name"]))
            ordered.append((pods[0]["metadata"].get("creationTimestamp", ""), minimum, pods, job))
        return [group[1:] for group in sorted(ordered, key=lambda g: g[0])]

    def once(self):
        settings = knobs(self.kube)
        if settings.get("kai-scheduler.paused") == "true":
            return
        gang = settings.get("kai-scheduler.gang", "true") != "false"
        self.settings = settings
        self.kai_config = self.config()
        if self.kai_config is not None:
            self.release_unused(self.kai_config)
        pending = [p for p in self.kube.request("GET", "/api/v1/pods", query={
            "fieldSelector": "spec.schedulerName=%s,spec.nodeName=,status.phase=Pending" % SCHEDULER}
        ).get("items", []) if not p["metadata"].get("deletionTimestamp")]
        if not pending:
            return
        cluster = Cluster(self.kube, self.reservation(self.kai_config)["namespace"],
                          split=settings.get("kai-binder.split-gpus") == "true")
        for minimum, pods, job in self.groups(cluster, pending, gang):
            self.place_group(cluster, minimum, pods, job)

    def place_group(self, cluster, minimum, pods, job):
        before = copy.deepcopy((cluster.nodes, cluster.usage))
        placed, reasons = [], {}
        for pod in pods:
            wanted = requests(pod)
            queue = cluster.queue_of(pod)
            try:
                fraction, devices = share(pod, next(iter(cluster.nodes.values()))["node"]) \
                    if cluster.nodes else (0.0, 0)
            except ValueError:
                fraction, devices = 0.0, 0
            asked = {"gpu": wanted["gpu"] + fraction * devices, "cpu": wanted["cpu"], "memory": wanted["memory"] / 1e6}
            problem = cluster.queue_problem(queue, asked)
            if problem:
                reasons[pod["metadata"]["uid"]] = problem
                continue
            node, indices = fits(cluster, pod, wanted)
            if node is None:
                reasons[pod["metadata"]["uid"]] = "Unable to schedule pod: %s" % indices
                continue
            actual = take(cluster, pod, node, indices, wanted)
            cluster.charge(queue, wanted, actual, len(indices) or 1)
            placed.append((pod, node, indices))
        if len(placed) < minimum:
            # the group starts whole or not at all: give back what the simulation took
            cluster.nodes, cluster.usage = before
            message = None
            if job and len(pods) < minimum:
                message = ("Job is not ready for scheduling. Waiting for %d pods, currently %d exist, 0 are gated"
                           % (minimum, len(pods)))
            elif job:
                why = next((r for r in reasons.values() if r), "")
                message = ("Unable to schedule the pod group of Job %s: %d pods must start together (%s), %d fit now%s"
                           % (job["metadata"]["name"], minimum, MIN_MEMBER, len(placed), "; " + why if why else ""))
            for pod in pods:
                self.unschedulable(pod, message or reasons.get(pod["metadata"]["uid"]) or "Unable to schedule pod")
            return
        for pod, node, indices in placed:
            try:
                self.bind(pod, node, indices, cluster.nodes[node]["node"], self.settings, self.kai_config)
            except ApiError as exc:
                log("binding failed", pod=pod["metadata"]["name"], error=str(exc))
        for pod in pods:
            if reasons.get(pod["metadata"]["uid"]):
                self.unschedulable(pod, reasons[pod["metadata"]["uid"]])


def main():
    kube, stop = Kube(), Stop()
    deployment = os.environ.get("STANDIN_DEPLOYMENT", "kai-scheduler")
    state = {"ready": True}
    serve_health(int(os.environ.get("STANDIN_HEALTH_PORT", HEALTH_PORT)), ready=lambda: state["ready"])
    log("scheduler (stand-in) started", deployment=deployment, scheduler=SCHEDULER)
    scheduler = Scheduler(kube)
    while stop.sleep(1):
        try:
            state["ready"] = deployment not in knobs(kube).get("kai-services.not-ready", "").split()
            scheduler.once()
        except (ApiError, OSError, ValueError, KeyError) as exc:
            log("scheduling pass failed, retrying", error=str(exc))
    log("scheduler (stand-in) stopped")
    return 0
