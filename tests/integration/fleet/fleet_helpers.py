"""Helpers for the fleet tests: a watcher of the lab's Nodes, run independently of the
playbook (it reads the API server, never the play's log), and the workloads."""
import hashlib
import json
import threading
import time

from kubernetes import client, config, watch

STATE = "nvidia.com/gpu-driver-upgrade-state"        # the GPU Operator's: the agents leave on it
ROLLOUT_STATE = "smshare.kai/driver-upgrade-state"   # the rollout's: every state


class NodeWatcher(threading.Thread):
    """Records every change of the watched Nodes' schedulability, readiness, upgrade-state
    labels (state: the rollout's, agents_state: the GPU Operator's) and boot id, and the most unschedulable / unavailable among them at any moment."""

    def __init__(self, kubeconfig, names):
        super().__init__(daemon=True)
        self.api = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
        self.names = set(names)
        self.current = {}
        self.changes = []            # (time, node, {field: value})
        self.max_unschedulable = 0
        self.max_unavailable = 0
        self.peak_unschedulable = []
        self.cordons = []            # (time, node, [the other nodes out of service then]) per rollout cordon
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.synced = threading.Event()

    @staticmethod
    def view(node):
        ready = [c.status for c in node.status.conditions or [] if c.type == "Ready"]
        return {"unschedulable": bool(node.spec.unschedulable), "ready": ready == ["True"],
                "state": (node.metadata.labels or {}).get(ROLLOUT_STATE, ""),
                "agents_state": (node.metadata.labels or {}).get(STATE, ""),
                "boot": node.status.node_info.boot_id if node.status.node_info else "",
                "driver": (node.metadata.labels or {}).get("nvidia.com/cuda.driver-version.full", "")}

    def record(self, node):
        name = node.metadata.name
        if name not in self.names:
            return
        now = self.view(node)
        with self.lock:
            before = self.current.get(name)
            diff = {k: v for k, v in now.items() if (before or {}).get(k) != v}
            if diff:
                self.current[name] = now
                if before is not None:   # the first sight of a node is no change
                    self.changes.append((time.time(), name, diff))
            cordoned = sorted(n for n, v in self.current.items() if v["unschedulable"])
            unavailable = [n for n, v in self.current.items() if v["unschedulable"] or not v["ready"]]
            if len(cordoned) > self.max_unschedulable:
                self.max_unschedulable, self.peak_unschedulable = len(cordoned), cordoned
            self.max_unavailable = max(self.max_unavailable, len(unavailable))
            if diff.get("state") == "cordon-required":
                self.cordons.append((time.time(), name, sorted(n for n in unavailable if n != name)))

    def run(self):
        # Each watch goes on from the last version seen, so no change falls between two watches
        # (a module run may enter several states a few milliseconds apart); listed again only
        # after an error (a version too old to watch from, a dropped connection).
        version = None
        while not self.stopping.is_set():
            try:
                if version is None:
                    listing = self.api.list_node()
                    for node in listing.items:
                        self.record(node)
                    version = listing.metadata.resource_version
                    self.synced.set()
                began = time.monotonic()
                for event in watch.Watch().stream(self.api.list_node, timeout_seconds=20, resource_version=version):
                    self.record(event["object"])
                    version = event["object"].metadata.resource_version
                    if self.stopping.is_set():
                        return
                if time.monotonic() - began < 1:
                    time.sleep(0.5)     # a watch the server ended at once: not a busy loop
            except Exception:   # noqa: BLE001 - a dropped watch is listed again
                version = None
                time.sleep(0.5)

    def stop(self):
        self.stopping.set()

    def changes_of(self, name, since=0.0, field=None):
        with self.lock:
            return [(t, d) for t, n, d in self.changes if n == name and t >= since and (field is None or field in d)]

    def cordons_since(self, since):
        """[(node, [other nodes cordoned or NotReady then])] for each cordon-required the rollout set."""
        with self.lock:
            return [(n, others) for t, n, others in self.cordons if t >= since]

    def states_of(self, name, since=0.0):
        return [d["state"] for _when, d in self.changes_of(name, since, "state")]

    def wait_for(self, name, state, timeout, process=None):
        """True once `name` is in `state`; False after `timeout` or when `process` ended first."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            with self.lock:
                if self.current.get(name, {}).get("state") == state:
                    return True
            if process is not None and process.poll() is not None:
                return False
            time.sleep(0.2)
        return False


def fractioning_daemonsets(namespace):
    """Stand-ins of the gpu-fractioning DaemonSets as their operator places them: on GPU
    nodes (nvidia.com/gpu.deploy.client=true) whose upgrade state is upgrade-done or unset."""
    def daemonset(component):
        return {
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": f"gpu-fractioning-{component}", "namespace": namespace},
            "spec": {
                "selector": {"matchLabels": {"app.kubernetes.io/component": component}},
                "template": {
                    "metadata": {"labels": {"app.kubernetes.io/component": component}},
                    "spec": {
                        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [
                                    {"key": "nvidia.com/gpu.deploy.client", "operator": "In", "values": ["true"]},
                                    {"key": STATE, "operator": "DoesNotExist"}]},
                                {"matchExpressions": [
                                    {"key": "nvidia.com/gpu.deploy.client", "operator": "In", "values": ["true"]},
                                    {"key": STATE, "operator": "In", "values": ["upgrade-done"]}]}]}}},
                        "containers": [{"name": component, "image": f"lab.invalid/kai-gpu-fractioning/{component}:1"}],
                    }}}}
    return [daemonset("mpsd"), daemonset("fractiond")]


def gpu_workloads(namespace, replicas):
    """Training pods that each hold a whole GPU (simulated by the node agents)."""
    return [{
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "trainer", "namespace": namespace},
        "spec": {
            "replicas": replicas, "selector": {"matchLabels": {"app": "trainer"}},
            "template": {"metadata": {"labels": {"app": "trainer"}}, "spec": {
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [{"name": "main", "image": "nvidia/cuda:13.3.1-base-ubuntu24.04",
                                "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}]


def finetune_job(namespace, node, seconds):
    """A GPU job that finishes after `seconds` on `node` (the agent's run-seconds annotation)."""
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "finetune", "namespace": namespace},
        "spec": {"backoffLimit": 0, "template": {
            "metadata": {"labels": {"smshare.kai/job": "finetune"},
                         "annotations": {"smshare.kai/lab-run-seconds": str(seconds)}},
            "spec": {"restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": node},
                     "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                     "containers": [{"name": "main", "image": "nvidia/cuda:13.3.1-base-ubuntu24.04",
                                     "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}


def as_list(objects):
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})


RESERVATION_NAMESPACE = "kai-resource-reservation"


def bare_pod(namespace, name, node, seconds=None, annotations=None):
    """A pod no controller manages, bound to `node` (a fraction, as KAI's binder places one)."""
    annotations = dict(annotations or {"gpu-fraction": "0.5"})
    if seconds is not None:
        annotations["smshare.kai/lab-run-seconds"] = str(seconds)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
            "spec": {"nodeName": node, "restartPolicy": "Never",
                     "containers": [{"name": "main", "image": "nvidia/cuda:13.3.1-base-ubuntu24.04"}]}}


def reservation_pod(node):
    """KAI's reservation pod as its binder makes one: bare, holding the whole GPU, not to be disrupted."""
    pod = bare_pod(RESERVATION_NAMESPACE, "gpu-reservation-" + hashlib.sha256(node.encode()).hexdigest()[:16], node,
                   annotations={"karpenter.sh/do-not-disrupt": "true"})
    pod["metadata"]["labels"] = {"app": RESERVATION_NAMESPACE, "runai-gpu-group": f"{node}-gpu0"}
    pod["spec"]["containers"][0].update(name="resource-reservation",
                                        resources={"limits": {"nvidia.com/gpu": 1}, "requests": {"nvidia.com/gpu": 1}})
    return pod


def guarded_server(namespace, node):
    """One replica pinned to `node` and a disruption budget that keeps it (policy/v1beta1: the lab's
    Kubernetes 1.20 has no policy/v1)."""
    return [{
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "keeper", "namespace": namespace},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "keeper"}},
                 "template": {"metadata": {"labels": {"app": "keeper"}}, "spec": {
                     "nodeSelector": {"kubernetes.io/hostname": node},
                     "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                     "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9"}]}}}}, {
        "apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "keeper", "namespace": namespace},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "keeper"}}}}]
