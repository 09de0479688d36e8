"""STAND-IN (lab only): the gpu-fractioning fork's operator and node daemons.

The operator owns GpuFractioningConfig `default`: finalizer, the mpsd and
fractiond (+ metricsd) DaemonSets a few seconds after it starts, the config's
conditions, each node's gpu-fractioning.nvidia.com/Ready condition, and the
clean-up on deletion. Names, labels, reasons and messages are upstream's
(lab/standin/charts/CONTRACT.md). The GPU Operator gate (gpuOperator.minimumVersion)
follows gpu-fractioning operator/internal/controller/dependency_checker.go @ db0ba2ec:
the ClusterPolicy's app.kubernetes.io/version label (else an OLM
ClusterServiceVersion gpu-operator*), Ready False GPUOperatorVersionUnsupported
below it, nothing when neither exists.

The node daemons log as the fork's do: JSON lines of Go's slog JSON handler
(kai-gpu-fractioning fractioning-manager/common/configuration/logger.go @
5440d2c6), with upstream's messages and keys.
"""
import datetime
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

from .kube import ApiError, Kube, Stop, condition, knobs, log, now, same_conditions, serve_health

GROUP = "/apis/gpu-fractioning.kai.scheduler/v1alpha1/gpufractioningconfigs"
CONFIG = f"{GROUP}/default"
FINALIZER = "gpu-fractioning.nvidia.com/cleanup-node-conditions"
NODE_CONDITION = "gpu-fractioning.nvidia.com/Ready"
MANAGED_BY = ("app.kubernetes.io/managed-by", "gpu-fractioning")
COMPONENT = "app.kubernetes.io/component"
DEPLOY_CLIENT = ("nvidia.com/gpu.deploy.client", "true")
UPGRADE_STATE = "nvidia.com/gpu-driver-upgrade-state"
MPS_PIPE = "/run/nvidia-mps"
MPS_LOG = "/var/log/nvidia-mps"
NRI_SOCKET = "/var/run/nri/nri.sock"
CRI_SOCKET = "/run/containerd/containerd.sock"
MAP_DIR = "/var/run/gpu-fractioning/map"
FRACTIOND_PORT = 8093
METRICSD_PORT = 2112
MANAGER = "gpu-fractioning-operator"
# mpsd's container resources (gpu-fractioning operator/internal/fractioningmanager/
# components/mpsd/mpsd.go and daemonmgr DaemonResources @ db0ba2ec): requests
# 50m, 128Mi and 100Mi ephemeral storage, a 1Gi memory limit;
# spec.mpsDaemon.resources is merged over them entry by entry.
MPSD_RESOURCES = {"requests": {"cpu": "50m", "memory": "128Mi", "ephemeral-storage": "100Mi"},
                  "limits": {"memory": "1Gi"}}
# lab: the node's GPU table (what NVML would report, lab/smshare_lab/node_tier.py),
# mounted from "the host" (lab.hostRoot) so mpsd can count the node's GPUs.
GPU_TABLE_DIR = "/etc/nvidia-standin"
GPU_TABLE = GPU_TABLE_DIR + "/gpus.json"
# The GPU Operator gate (dependency_checker.go @ db0ba2ec).
DEFAULT_MINIMUM_GPU_OPERATOR_VERSION = "v26.7.1"
CLUSTER_POLICIES = "/apis/nvidia.com/v1/clusterpolicies"
CLUSTER_SERVICE_VERSIONS = "/apis/operators.coreos.com/v1alpha1/clusterserviceversions"
CLUSTER_POLICY_VERSION_LABEL = "app.kubernetes.io/version"


def image_from_env(prefix):
    repository, tag = os.environ.get(f"{prefix}_IMAGE_REPOSITORY", ""), os.environ.get(f"{prefix}_IMAGE_TAG", "")
    return (f"{repository}:{tag}" if tag else repository), os.environ.get(f"{prefix}_IMAGE_PULL_POLICY") or "IfNotPresent"


def host_path(host_root, path, kind="DirectoryOrCreate"):
    """A hostPath volume source; the lab puts "the host" under its knob lab.hostRoot."""
    source = {"path": f"{host_root}{path}" if host_root else path}
    if kind:
        source["type"] = kind
    return {"hostPath": source}


def base_daemonset(component, namespace, config, host_root):
    spec = config.get("spec") or {}
    labels = {MANAGED_BY[0]: MANAGED_BY[1], COMPONENT: component}
    selector = dict(spec.get("nodeSelector") or {})
    selector[DEPLOY_CLIENT[0]] = DEPLOY_CLIENT[1]
    pod = {
        "nodeSelector": selector,
        "serviceAccountName": os.environ.get("DAEMON_SERVICE_ACCOUNT_NAME") or "default",
        "hostPID": True,
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": UPGRADE_STATE, "operator": "DoesNotExist"}]},
            {"matchExpressions": [{"key": UPGRADE_STATE, "operator": "In", "values": ["upgrade-done"]}]}]}}},
        "containers": [], "volumes": [],
    }
    if spec.get("tolerations"):
        pod["tolerations"] = spec["tolerations"]
    meta = config["metadata"]
    owner = {"apiVersion": "gpu-fractioning.kai.scheduler/v1alpha1", "kind": "GpuFractioningConfig",
             "name": meta["name"], "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": f"gpu-fractioning-{component}", "namespace": namespace, "labels": labels,
                         "ownerReferences": [owner]},
            "spec": {"selector": {"matchLabels": labels}, "updateStrategy": {"type": "RollingUpdate"},
                     "template": {"metadata": {"labels": dict(labels)}, "spec": pod}}}


def runtime_class(spec):
    value = spec.get("runtimeClassName")
    return "nvidia" if value is None else (value or None)


def mpsd_daemonset(namespace, config, host_root):
    spec = config.get("spec") or {}
    ds = base_daemonset("mpsd", namespace, config, host_root)
    pod = ds["spec"]["template"]["spec"]
    if runtime_class(spec):
        pod["runtimeClassName"] = runtime_class(spec)
    image, policy = image_from_env("MPSD")
    mps = spec.get("mpsDaemon") or {}
    # Upstream: the graceful stop delay (default 60 s) plus 15 s, so kubelet never kills mpsd mid-quit.
    delay = go_seconds(mps.get("gracefulStopDelay") or "")
    pod["terminationGracePeriodSeconds"] = int((GRACEFUL_STOP_DELAY if delay is None else delay) + 15)
    args = []
    if mps.get("gracefulStopDelay"):
        args += ["--graceful-stop-delay", mps["gracefulStopDelay"]]
    probe = {"exec": {"command": ["test", "-S", f"{MPS_PIPE}/control"]}, "initialDelaySeconds": 1, "periodSeconds": 2}
    container = {
        "name": "mpsd", "image": image, "imagePullPolicy": policy, "args": args,
        "securityContext": {"privileged": True}, "readinessProbe": probe,
        "resources": daemon_resources(MPSD_RESOURCES, mps.get("resources")),
        # The MPS folders, for the daemon and for `kubectl exec ... nvidia-cuda-mps-control`.
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "CUDA_MPS_PIPE_DIRECTORY", "value": MPS_PIPE},
                {"name": "CUDA_MPS_LOG_DIRECTORY", "value": MPS_LOG},
                {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"},
                {"name": "MPS_MEMACCT_AUDIT_LOG", "value": os.environ.get("MPSD_AUDIT_LOG", "true")},
                {"name": "MPS_SUPPORT_SM_SHARING", "value": os.environ.get("SUPPORT_SM_SHARING", "true")},
                # lab: the container's memory limit (downward API), which stands in
                # for the host memory the MPS server's CUDA contexts take.
                {"name": "MPSD_MEMORY_LIMIT", "valueFrom": {"resourceFieldRef": {
                    "containerName": "mpsd", "resource": "limits.memory"}}}],
        "volumeMounts": [{"name": "mps-pipe", "mountPath": MPS_PIPE}, {"name": "mps-log", "mountPath": MPS_LOG}],
    }
    pod["volumes"] = [{"name": "mps-pipe", **host_path(host_root, MPS_PIPE)},
                      {"name": "mps-log", **host_path(host_root, MPS_LOG)}]
    if host_root:
        # lab: the node's GPU table, where mpsd counts the GPUs NVML would list.
        container["env"].append({"name": "NVIDIA_STANDIN_GPUS", "value": GPU_TABLE})
        container["volumeMounts"].append({"name": "standin-gpus", "mountPath": GPU_TABLE_DIR, "readOnly": True})
        pod["volumes"].append({"name": "standin-gpus", **host_path(host_root, GPU_TABLE_DIR, None)})
    pod["containers"].append(container)
    return ds


def daemon_resources(defaults, override):
    """ResolveDaemonResources (daemonmgr @ db0ba2ec): the override merged over the
    defaults entry by entry (requests and limits separately)."""
    override = override or {}
    resolved = {}
    for key in ("requests", "limits"):
        merged = dict(defaults.get(key) or {})
        merged.update(override.get(key) or {})
        if merged:
            resolved[key] = merged
    return resolved


def fractiond_daemonset(namespace, config, host_root):
    spec = config.get("spec") or {}
    agent = spec.get("fractioningAgent") or {}
    ds = base_daemonset("fractiond", namespace, config, host_root)
    pod = ds["spec"]["template"]["spec"]
    nri = agent.get("nriSocketPath") or NRI_SOCKET
    cri = agent.get("criSocketPath") or CRI_SOCKET
    port = agent.get("readinessPort") or FRACTIOND_PORT
    image, policy = image_from_env("FRACTIOND")
    fractiond = {
        "name": "fractiond", "image": image, "imagePullPolicy": policy,
        "args": [f"--nri-socket={nri}", f"--cri-socket={cri}", f"--readiness-port={port}"],
        "securityContext": {"privileged": True},
        "ports": [{"name": "readiness", "containerPort": port}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": port}, "initialDelaySeconds": 1, "periodSeconds": 2},
        "volumeMounts": [{"name": "nri-socket", "mountPath": os.path.dirname(nri)},
                         {"name": "mps-pipe", "mountPath": MPS_PIPE}],
    }
    pod["volumes"] = [{"name": "nri-socket", **host_path(host_root, os.path.dirname(nri), None)},
                      {"name": "mps-pipe", **host_path(host_root, MPS_PIPE, None)}]
    if agent.get("retroactiveEnforcement", True):
        fractiond["volumeMounts"].append({"name": "cri-socket", "mountPath": os.path.dirname(cri)})
        pod["volumes"].append({"name": "cri-socket", **host_path(host_root, os.path.dirname(cri))})
    pod["containers"].append(fractiond)
    if (spec.get("metricsAgent") or {}).get("enabled"):
        pod["volumes"].append({"name": "map-dir", **host_path(host_root, MAP_DIR)})
        fractiond["volumeMounts"].append({"name": "map-dir", "mountPath": MAP_DIR})
        if runtime_class(spec):
            pod["runtimeClassName"] = runtime_class(spec)
        image, policy = image_from_env("METRICSD")
        pod["containers"].append({
            "name": "metricsd", "image": image, "imagePullPolicy": policy, "securityContext": {"privileged": True},
            "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                    {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"}],
            "ports": [{"name": "metrics", "containerPort": METRICSD_PORT}],
            "readinessProbe": {"httpGet": {"path": "/readyz", "port": METRICSD_PORT},
                               "initialDelaySeconds": 1, "periodSeconds": 2},
            "volumeMounts": [{"name": "map-dir", "mountPath": MAP_DIR, "readOnly": True}],
        })
        ds["spec"]["template"]["metadata"]["annotations"] = {
            "prometheus.io/scrape": "true", "prometheus.io/port": str(METRICSD_PORT), "prometheus.io/path": "/metrics"}
    return ds


def daemon_condition(name, desired, ready, gen, old):
    ctype = name[0].upper() + name[1:] + "Ready"
    if desired == 0:
        return condition(ctype, "True", "NoTargetNodes", "no target nodes found", gen, old)
    if ready == desired:
        return condition(ctype, "True", "AllPodsReady", f"{ready} of {desired} pods ready", gen, old)
    reason = "RolloutInProgress" if ready == 0 else "PartiallyAvailable"
    return condition(ctype, "False", reason, f"{ready} of {desired} pods ready", gen, old)


def ready_condition(daemon_conditions, gen, old):
    bad = [c["type"] for c in daemon_conditions if c["status"] == "False"]
    if bad:
        return condition("Ready", "False", "ComponentNotReady", "not ready: " + ", ".join(bad), gen, old)
    unknown = [c["type"] for c in daemon_conditions if c["status"] == "Unknown"]
    if unknown:
        return condition("Ready", "Unknown", "ComponentUnknown", "unknown: " + ", ".join(unknown), gen, old)
    return condition("Ready", "True", "AllComponentsReady", "all components are healthy", gen, old)


def pod_ready(pod):
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def pod_failure_reason(pod):
    status = pod.get("status") or {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for cs in status.get(key) or []:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason"):
                return waiting["reason"]
    return {"Pending": "Pending", "Failed": "Failed"}.get(status.get("phase"), "NotReady")


def node_condition_of(node):
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == NODE_CONDITION:
            return cond
    return None


# -- the GPU Operator gate (dependency_checker.go @ db0ba2ec) ----------------

SEMVER_RE = re.compile(r"v(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?")


def normalize_gpu_operator_version(version):
    """normalizeGPUOperatorVersion: "26.7.1" -> "v26.7.1", "v26.7" -> "v26.7.0"; None when invalid."""
    text = (version or "").strip()
    if not text:
        return None
    if not text.startswith("v"):
        text = "v" + text
    cut = min([i for i in (text.find("-"), text.find("+")) if i >= 0] or [len(text)])
    main, suffix = text[:cut], text[cut:]
    if main.count(".") < 2:   # Go's semver takes v26 and v26.7 as shorthands
        text = main + ".0" * (2 - main.count(".")) + suffix
    match = SEMVER_RE.fullmatch(text)
    if not match or any(len(p) > 1 and p.startswith("0") for p in match.groups()[:3]):
        return None
    return "v%s.%s.%s%s" % (match.group(1), match.group(2), match.group(3),
                            "-" + match.group(4) if match.group(4) else "")


def compare_versions(left, right):
    """semver.Compare of two canonical versions: -1, 0 or 1 (a pre-release sorts before its release)."""
    def key(version):
        match = SEMVER_RE.fullmatch(version)
        pre = match.group(4)
        parts = [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split(".")] if pre else []
        return tuple(int(match.group(i)) for i in (1, 2, 3)), pre is None, parts
    a, b = key(left), key(right)
    return (a > b) - (a < b)


def minimum_gpu_operator_version(raw):
    """NewGpuOperatorDependencyChecker: "" switches the gate off; an unparsable
    value falls back to the default rather than accepting everything."""
    raw = (raw or "").strip()
    if not raw:
        return ""
    return normalize_gpu_operator_version(raw) or DEFAULT_MINIMUM_GPU_OPERATOR_VERSION


def gpu_operator_version_failure(raw, source, minimum):
    """gpuOperatorVersionFailureMessage: why raw fails the gate, or ""."""
    if not minimum:
        return ""
    raw = (raw or "").strip()
    if not raw:
        return f"NVIDIA GPU Operator version from {source} is missing; minimum supported version is {minimum}"
    version = normalize_gpu_operator_version(raw)
    if not version:
        return (f"NVIDIA GPU Operator version {json.dumps(raw)} from {source} is invalid; "
                f"minimum supported version is {minimum}")
    if compare_versions(version, minimum) < 0:
        return f"NVIDIA GPU Operator version {raw} is below minimum supported version {minimum}"
    return ""


def cluster_policy_readiness_failure(policy):
    """clusterPolicyReadinessFailureMessage."""
    status = policy.get("status") or {}
    conds = {c.get("type"): c for c in status.get("conditions") or []}
    error = conds.get("Error")
    if error and str(error.get("status", "")).strip().lower() == "true":
        return error.get("message") or "NVIDIA GPU Operator ClusterPolicy reports Error=True"
    ready = conds.get("Ready")
    if ready and str(ready.get("status", "")).strip().lower() != "true":
        return ready.get("message") or ("NVIDIA GPU Operator ClusterPolicy Ready condition is %s"
                                        % ((ready.get("status") or "").strip() or "Unknown"))
    if "state" in status:
        state = status.get("state") or ""
        if state.strip().lower() != "ready":
            return f"NVIDIA GPU Operator ClusterPolicy state is {json.dumps(state)}, expected \"ready\""
        return ""
    if not ready:
        return "NVIDIA GPU Operator ClusterPolicy status does not report readiness"
    return ""


def gpu_operator_gate(policies, csvs, minimum, ready):
    """GpuOperatorDependencyChecker.Check on lists already read: the Ready
    condition to write as (status, reason, message). policies/csvs: lists, or an
    ApiError/OSError raised while listing them (404s are empty lists)."""
    if isinstance(policies, Exception):
        return ("False", "GPUOperatorNotReady", f"unable to read NVIDIA GPU Operator ClusterPolicy: {policies}")
    if not policies:
        if isinstance(csvs, Exception):
            return ("False", "GPUOperatorNotReady", "unable to discover NVIDIA GPU Operator version from "
                    f"ClusterPolicy or ClusterServiceVersion: failed to list ClusterServiceVersions: {csvs}")
        for csv in csvs or []:
            if ((csv.get("metadata") or {}).get("name") or "").startswith("gpu-operator"):
                msg = gpu_operator_version_failure(((csv.get("spec") or {}).get("version") or "").strip(),
                                                   "ClusterServiceVersion", minimum)
                return ("False", "GPUOperatorVersionUnsupported", msg) if msg else ready
        return ready
    policy = policies[0]
    version = ((policy.get("metadata") or {}).get("labels") or {}).get(CLUSTER_POLICY_VERSION_LABEL, "")
    msg = gpu_operator_version_failure(version, f"ClusterPolicy label {json.dumps(CLUSTER_POLICY_VERSION_LABEL)}",
                                       minimum)
    if msg:
        return ("False", "GPUOperatorVersionUnsupported", msg)
    if ready[0] == "False":
        msg = cluster_policy_readiness_failure(policy)
        if msg:
            return ("False", "GPUOperatorNotReady", msg)
    return ready


def operator_flags(argv):
    """The operator's flags the chart passes (deployment.yaml @ db0ba2ec)."""
    flags = {"min-gpu-operator-version": DEFAULT_MINIMUM_GPU_OPERATOR_VERSION}
    for arg in argv or []:
        if arg.startswith("--") and "=" in arg:
            key, value = arg[2:].split("=", 1)
            flags[key] = value
    return flags


class Operator:
    def __init__(self, argv=None):
        self.minimum_gpu_operator_version = minimum_gpu_operator_version(
            operator_flags(argv)["min-gpu-operator-version"])
        self.kube, self.stop = Kube(), Stop()
        self.namespace = os.environ.get("POD_NAMESPACE") or self.kube.namespace()
        self.started = time.monotonic()
        self.applied = {}
        self.knobs = {}

    def run(self):
        serve_health(8081)
        log("starting gpu-fractioning operator (stand-in)", namespace=self.namespace,
            minGpuOperatorVersion=self.minimum_gpu_operator_version)
        while self.stop.sleep(1):
            try:
                self.knobs = knobs(self.kube)
                if self.knobs.get("gpu-fractioning-operator.paused") != "true":
                    self.reconcile()
            except (ApiError, OSError) as exc:
                log("reconcile failed, retrying", error=str(exc))
        self.mark_nodes_unknown()
        log("gpu-fractioning operator stopped")

    # -- the config's lifecycle
    def reconcile(self):
        config = self.kube.get(CONFIG)
        if not config:
            return
        meta = config["metadata"]
        if meta.get("deletionTimestamp"):
            self.reconcile_delete(config)
            return
        if FINALIZER not in (meta.get("finalizers") or []):
            self.kube.merge_patch(CONFIG, {"metadata": {"finalizers": (meta.get("finalizers") or []) + [FINALIZER],
                                                        "resourceVersion": meta["resourceVersion"]}})
            log("finalizer added", finalizer=FINALIZER)
            return
        delay = float(self.knobs.get("gpu-fractioning-operator.delay", "5"))
        if time.monotonic() - self.started < delay:
            return
        host_root = self.knobs.get("lab.hostRoot", "")
        health = {}
        for name, build in (("fractiond", fractiond_daemonset), ("mpsd", mpsd_daemonset)):
            body = build(self.namespace, config, host_root)
            path = f"/apis/apps/v1/namespaces/{self.namespace}/daemonsets/{body['metadata']['name']}"
            digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
            found = self.kube.get(path)
            if not found or self.applied.get(name) != digest:
                found = self.kube.apply(path, body, MANAGER)
                self.applied[name] = digest
                log("daemonset applied", name=body["metadata"]["name"], image=[
                    c["image"] for c in body["spec"]["template"]["spec"]["containers"]])
            status = found.get("status") or {}
            health[name] = (status.get("desiredNumberScheduled", 0), status.get("numberReady", 0))
        self.write_status(config, health)
        self.patch_node_conditions(config)

    def write_status(self, config, health):
        gen = config["metadata"].get("generation")
        old = (config.get("status") or {}).get("conditions") or []
        daemons = [daemon_condition(name, *health[name], gen, old) for name in ("fractiond", "mpsd")]
        upgrading = self.upgrading_nodes(config)
        upgrade = (condition("DriverUpgradeInProgress", "True", "DriverUpgrading",
                             "a targeted GPU node is undergoing a driver upgrade; its managed daemons are drained",
                             gen, old) if upgrading else
                   condition("DriverUpgradeInProgress", "False", "NoDriverUpgrade", "", gen, old))
        ready = ready_condition(daemons, gen, old)
        status, reason, message = gpu_operator_gate(*self.gpu_operator_objects(), self.minimum_gpu_operator_version,
                                                    (ready["status"], ready["reason"], ready["message"]))
        if (status, reason, message) != (ready["status"], ready["reason"], ready["message"]):
            ready = condition("Ready", status, reason, message, gen, old)
        new = daemons + [ready, upgrade]
        if not same_conditions(old, new) or (config.get("status") or {}).get("observedGeneration") != gen:
            self.kube.merge_patch(CONFIG + "/status", {"status": {"conditions": new, "observedGeneration": gen}})
            log("status updated", conditions={c["type"]: c["status"] for c in new})

    def gpu_operator_objects(self):
        """The ClusterPolicies and ClusterServiceVersions (or the error reading them);
        a kind the cluster does not serve is an empty list."""
        found = []
        for path in (CLUSTER_POLICIES, CLUSTER_SERVICE_VERSIONS):
            try:
                found.append(self.kube.list(path))
            except (ApiError, OSError) as exc:
                found.append(exc)
        return found

    def upgrading_nodes(self, config):
        selector = ",".join(f"{k}={v}" for k, v in ((config.get("spec") or {}).get("nodeSelector") or {}).items())
        upgrading = [selector, UPGRADE_STATE, f"{UPGRADE_STATE}!=upgrade-done"]
        nodes = self.kube.list("/api/v1/nodes", ",".join(filter(None, upgrading)))
        for node in nodes:
            if node_condition_of(node):
                self.remove_node_condition(node["metadata"]["name"])
        return [n["metadata"]["name"] for n in nodes]

    # -- node conditions
    def daemon_pods(self):
        return self.kube.list(f"/api/v1/namespaces/{self.namespace}/pods", "=".join(MANAGED_BY))

    def patch_node_conditions(self, config):
        per_node = {}
        for pod in self.daemon_pods():
            node = (pod.get("spec") or {}).get("nodeName")
            if not node:
                continue
            if not pod_ready(pod):
                reason = pod_failure_reason(pod)
                component = pod["metadata"].get("labels", {}).get(COMPONENT, "")
                per_node[node] = ("False", reason, f"{component} pod is not ready: {reason}")
            elif node not in per_node:
                per_node[node] = ("True", "AllDaemonsReady", "all gpu-fractioning daemons are running")
        for node_name, (status, reason, message) in per_node.items():
            self.set_node_condition(node_name, status, reason, message)

    def set_node_condition(self, node_name, status, reason, message):
        node = self.kube.get(f"/api/v1/nodes/{node_name}")
        if not node:
            return
        existing = node_condition_of(node) or {}
        if (existing.get("status"), existing.get("reason"), existing.get("message")) == (status, reason, message):
            return
        stamp = now()
        transition = existing.get("lastTransitionTime") if existing.get("status") == status else stamp
        cond = {"type": NODE_CONDITION, "status": status, "reason": reason, "message": message,
                "lastHeartbeatTime": stamp, "lastTransitionTime": transition or stamp}
        self.kube.strategic_patch(f"/api/v1/nodes/{node_name}/status", {"status": {"conditions": [cond]}})
        log("node condition set", node=node_name, status=status, reason=reason)

    def remove_node_condition(self, node_name):
        self.kube.strategic_patch(f"/api/v1/nodes/{node_name}/status",
                                  {"status": {"conditions": [{"type": NODE_CONDITION, "$patch": "delete"}]}})
        log("node condition removed", node=node_name)

    def mark_nodes_unknown(self):
        try:
            for node in self.kube.list("/api/v1/nodes"):
                if node_condition_of(node):
                    self.set_node_condition(node["metadata"]["name"], "Unknown", "ControllerUnavailable",
                                            "the gpu-fractioning controller is not running; node readiness "
                                            "is not being maintained")
        except (ApiError, OSError) as exc:
            log("could not mark node conditions Unknown", error=str(exc))

    # -- deletion: DaemonSets, their pods, node conditions, then the finalizer
    def reconcile_delete(self, config):
        meta = config["metadata"]
        if FINALIZER not in (meta.get("finalizers") or []):
            return
        # Foreground deletion: a DaemonSet object outlives its pods until the
        # garbage collector lets it go, so wait for both to be gone.
        daemonsets = []
        for name in ("fractiond", "mpsd"):
            path = f"/apis/apps/v1/namespaces/{self.namespace}/daemonsets/gpu-fractioning-{name}"
            found = self.kube.get(path)
            if not found:
                continue
            daemonsets.append(f"gpu-fractioning-{name}")
            if not found["metadata"].get("deletionTimestamp"):
                self.kube.delete(path, "Foreground")
                log("daemonset deleted", name=f"gpu-fractioning-{name}")
        self.applied.clear()
        left = [p["metadata"]["name"] for p in self.daemon_pods()]
        if left or daemonsets:
            log("waiting for daemon pods and daemonsets to go", pods=left, daemonsets=daemonsets)
            return
        for node in self.kube.list("/api/v1/nodes"):
            if node_condition_of(node):
                self.remove_node_condition(node["metadata"]["name"])
        self.kube.merge_patch(CONFIG, {"metadata": {
            "finalizers": [f for f in meta["finalizers"] if f != FINALIZER],
            "resourceVersion": meta["resourceVersion"]}})
        log("removed node conditions and finalizer; deletion can complete")


# -- node daemons -------------------------------------------------------------

# mpsd's defaults (supervisor.go @ 0ee10b42 / G 74410de, main.go, flags.go).
MPS_BINARY = "/usr/bin/nvidia-cuda-mps-control"
MPS_CONFIG = "/etc/nvidia-mps/mps-control.toml"
MPS_CONTROL_PORT = "3"
SHARED_SERVER = "shared"
DEFAULT_NAMESPACE_ATP = 10
GRACEFUL_STOP_DELAY = 60.0   # mpsd's DefaultGracefulStopDelay: after "quit", before the kill
CONTROL_SOCKET_TIMEOUT = 60.0
# The guide (row 8): each CUDA server context takes about 50 MiB of host memory.
MIB_PER_GPU_CONTEXT = 50


def slog(level, msg, **attrs):
    """One line of Go's slog JSON handler: time, level, msg, then the attributes."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    record = {"time": stamp, "level": level, "msg": msg}
    record.update(attrs)
    print(json.dumps(record, separators=(",", ":")), flush=True)


def env_bool(name, default):
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    return value.strip().lower() in ("1", "t", "true", "yes", "on")


def mps_config(audit_log=True, sm_sharing=True):
    """The MPS control daemon's TOML (K fractioning-manager/mpsd/internal/config.go
    @ 0ee10b42, the production test case): memacct on with its audit log,
    context-share on with default_socket "off" and a bare [servers.shared]; without
    sm-sharing, context-share off and no shared server (G main.go @ 74410de)."""
    text = "[features.memacct]\nenabled=true\naudit_log=%s\n\n[features.context-share]\nenabled=%s\n" % (
        "true" if audit_log else "false", "true" if sm_sharing else "false")
    if sm_sharing:
        text += 'default_socket="off"\n\n[servers.%s]\n' % SHARED_SERVER
    return text


def mps_args(control_port, multiuser, config_path):
    """buildMPSArgs (supervisor.go): [-p <port>] [-m] -f [-a <config>]."""
    args = ["-p", control_port] if control_port else []
    if multiuser:
        args.append("-m")
    args.append("-f")
    if config_path:
        args += ["-a", config_path]
    return args


def node_gpus(path):
    """lab: the node's GPUs from its GPU table (what NVML would list); [] without it."""
    try:
        with open(path) as handle:
            return json.load(handle).get("gpus") or []
    except (OSError, ValueError):
        return []


def host_memory_shortfall(limit_bytes, gpus):
    """lab: the index of the first GPU whose CUDA server context does not fit in
    the pod's memory limit (about 50 MiB each), or None when all fit."""
    try:
        limit_mib = int(limit_bytes) // 2 ** 20
    except (TypeError, ValueError):
        return None
    if not gpus or limit_mib >= MIB_PER_GPU_CONTEXT * len(gpus):
        return None
    return limit_mib // MIB_PER_GPU_CONTEXT


def wait_for_socket(path, timeout, stop):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if os.path.exists(path) and os.stat(path).st_mode & 0o170000 == 0o140000:
                return True
        except OSError:
            pass
        if not stop.sleep(0.1):
            return False
    return False


def cap_default_namespace(binary, control_port, env, percentage):
    """mpsns Reconcile's first step: `namespace set default --server=shared
    --active-thread-percentage=P` on the protocol 3 daemon."""
    argv = [binary] + (["-p", control_port] if control_port else []) + [
        "namespace", "set", "default", f"--server={SHARED_SERVER}", f"--active-thread-percentage={percentage}"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    return done.returncode == 0, (done.stdout + done.stderr).strip()


def go_seconds(text):
    """A Go duration ("60s", "1m30s", "500ms") in seconds; None when it is not one."""
    parts = re.fullmatch(r"((?:[0-9.]+(?:h|m|s|ms))+)", text or "")
    if not parts:
        return None
    unit = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    return sum(float(n) * unit[u] for n, u in re.findall(r"([0-9.]+)(ms|h|m|s)", text))


def graceful_stop_delay(argv):
    """--graceful-stop-delay, else MPS_GRACEFUL_STOP_DELAY, else upstream's 60 s."""
    value = os.environ.get("MPS_GRACEFUL_STOP_DELAY", "")
    for i, arg in enumerate(argv or []):
        if arg == "--graceful-stop-delay" and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--graceful-stop-delay="):
            value = arg.split("=", 1)[1]
    seconds = go_seconds(value)
    return GRACEFUL_STOP_DELAY if seconds is None else seconds


def mpsd(argv):
    kube, stop = Kube(), Stop()
    the_knobs = knobs(kube)
    pipe_dir = os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or MPS_PIPE
    log_dir = os.environ.get("CUDA_MPS_LOG_DIRECTORY") or MPS_LOG
    binary = os.environ.get("MPS_CONTROL_BINARY") or shutil.which("nvidia-cuda-mps-control") or MPS_BINARY
    control_port = os.environ.get("MPS_CONTROL_PORT", MPS_CONTROL_PORT)
    config_path = os.environ.get("MPS_CONFIG_PATH") or MPS_CONFIG
    audit_log = env_bool("MPS_MEMACCT_AUDIT_LOG", True)
    sm_sharing = env_bool("MPS_SUPPORT_SM_SHARING", True)
    try:
        atp = int(os.environ.get("MPS_DEFAULT_NAMESPACE_ATP") or 0) or DEFAULT_NAMESPACE_ATP
    except ValueError:
        atp = DEFAULT_NAMESPACE_ATP
    slog("INFO", "starting mpsd", pipeDir=pipe_dir, logDir=log_dir, mpsBinary=binary, controlPort=control_port,
         configPath=config_path, memacctAuditLog=audit_log)
    if the_knobs.get("mpsd.not-ready") == "true":
        slog("INFO", "lab knob mpsd.not-ready: not starting the MPS control daemon")
        while stop.sleep(3600):
            pass
        return 0
    if not sm_sharing:
        slog("INFO", "sm-sharing is disabled, so no per-container MPS namespaces will be provisioned")
    for folder in (pipe_dir, log_dir):
        os.makedirs(folder, mode=0o755, exist_ok=True)
    os.makedirs(os.path.dirname(config_path), mode=0o755, exist_ok=True)
    with open(config_path, "w") as handle:
        handle.write(mps_config(audit_log, sm_sharing))
    os.chmod(config_path, 0o644)
    slog("INFO", "wrote MPS config", path=config_path)
    try:
        os.unlink(os.path.join(pipe_dir, "control"))
    except FileNotFoundError:
        pass
    except OSError as exc:
        slog("WARN", "failed to remove stale MPS control socket", path=os.path.join(pipe_dir, "control"),
             error=str(exc))
    # Multiuser is wired to sm-sharing (G main.go); lab knob mpsd.multiuser "false" drops -m.
    multiuser = sm_sharing and the_knobs.get("mpsd.multiuser", "true") != "false"
    args = mps_args(control_port, multiuser, config_path)
    slog("INFO", "starting MPS daemon", binary=binary, args=args, pipeDir=pipe_dir, logDir=log_dir,
         configPath=config_path)
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=pipe_dir, CUDA_MPS_LOG_DIRECTORY=log_dir)
    gpus = node_gpus(os.environ.get("NVIDIA_STANDIN_GPUS") or GPU_TABLE)
    short = host_memory_shortfall(os.environ.get("MPSD_MEMORY_LIMIT"), gpus)
    if short is not None:
        # lab: the MPS server's CUDA contexts (one per GPU, about 50 MiB of host
        # memory each) do not fit in the pod's memory limit: the CUDA allocation
        # fails before the kernel OOM-kills anything, and the pod exits 1 with
        # CUDA_ERROR_OUT_OF_MEMORY while the GPUs sit idle (mpsd.go @ db0ba2ec).
        stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        print("[%s Control %5d] Server '%s' failed to start: creating the CUDA context on device %d (%s) failed: "
              "CUDA_ERROR_OUT_OF_MEMORY: out of memory" % (stamp, os.getpid(), SHARED_SERVER, short,
                                                           gpus[short].get("uuid", "?")), flush=True)
        slog("ERROR", "mpsd exiting with error", error="MPS daemon failed after 1 attempts: exit status 1")
        return 1
    daemon = subprocess.Popen([binary] + args, env=env, stdin=subprocess.PIPE)
    capped = False
    if sm_sharing and atp > 0:
        socket_path = os.path.join(pipe_dir, "control")
        if wait_for_socket(socket_path, CONTROL_SOCKET_TIMEOUT, stop):
            ok, out = cap_default_namespace(binary, control_port, env, atp)
            if ok:
                slog("INFO", "capped the default MPS namespace as defence in depth", server=SHARED_SERVER,
                     namespace="default", activeThreadPercent=atp)
                capped = True
            else:
                slog("WARN", "MPS namespace reconciliation did not complete",
                     error=f'capping the "default" namespace: {out}')
        elif daemon.poll() is None:
            slog("WARN", "MPS control socket did not appear; skipping post-start configuration",
                 socket=socket_path, timeout=f"{CONTROL_SOCKET_TIMEOUT:g}s")
    ignore_flag = os.path.join(pipe_dir, "standin-ignore-cap")
    while stop.sleep(1):
        if daemon.poll() is not None:
            slog("ERROR", "mpsd exiting with error",
                 error=f"MPS daemon failed after 1 attempts: exit status {daemon.returncode}")
            return 1
        try:
            ignore = knobs(kube).get("mps.ignore-cap") == "true"
        except (ApiError, OSError):
            continue
        # lab knob mps.ignore-cap: the server grants clients what they ask (caps not enforced)
        if ignore and not os.path.exists(ignore_flag):
            open(ignore_flag, "w").close()
        elif not ignore and os.path.exists(ignore_flag):
            os.unlink(ignore_flag)
    slog("INFO", "received shutdown signal, stopping MPS daemon")
    subprocess.run([binary, "-q"], env=env, check=False)
    try:   # MPS quits once its clients are gone; killed after the graceful stop delay
        daemon.wait(timeout=graceful_stop_delay(argv))
    except subprocess.TimeoutExpired:
        daemon.kill()
    try:
        daemon.stdin.close()
    except OSError:
        pass
    slog("INFO", "mpsd shutdown complete", defaultNamespaceCapped=capped)
    return 0


def socket_connectable(path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(2)
    try:
        sock.connect(path)
        return True
    except OSError:
        return False
    finally:
        sock.close()


def fractiond(argv):
    options = dict(arg[2:].split("=", 1) for arg in argv if arg.startswith("--") and "=" in arg)
    nri = options.get("nri-socket", NRI_SOCKET)
    port = int(options.get("readiness-port", FRACTIOND_PORT))
    kube, stop = Kube(), Stop()
    state = {"ready": False}
    serve_health(port, ready=lambda: state["ready"])
    slog("INFO", "connecting to NRI runtime", attempt=1, plugin="gpu-fractioning", idx="10", socket=nri)
    last = None
    while True:
        registered = socket_connectable(nri)
        forced = knobs(kube).get("fractiond.not-ready") == "true"
        ready = registered and not forced
        if ready != last:
            if not registered:
                slog("WARN", f"NRI socket {nri} not available; retrying", socket=nri)
            elif forced:
                slog("INFO", "lab knob fractiond.not-ready: reporting not ready")
            else:
                # plugin.go Configure (@ 0ee10b42); the lab's NRI socket is a
                # stand-in, so the runtime's name and version are the lab's.
                slog("INFO", "configured NRI plugin", runtime="containerd", runtimeVersion="stand-in")
            last = ready
        state["ready"] = ready
        if not stop.sleep(2):
            slog("INFO", "fractiond shutdown complete")
            return 0


def metricsd(argv):
    stop = Stop()
    serve_health(METRICSD_PORT, metrics=lambda: "# gpu-fractioning metricsd (stand-in): no GPU metrics in the lab")
    log("metricsd (stand-in) serving", address=f":{METRICSD_PORT}")
    while stop.sleep(3600):
        pass
    return 0


def main(image, argv):
    if image == "operator":
        Operator(argv).run()
        return 0
    return {"mpsd": mpsd, "fractiond": fractiond, "metricsd": metricsd}[image](argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
