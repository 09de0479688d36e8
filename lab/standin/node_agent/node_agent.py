# Apache-2.0
"""STAND-IN node agent: makes a lab GPU-node container a Kubernetes Node.

It is NOT a kubelet. In the manner of KWOK (kubernetes-sigs/kwok, the
Kubernetes project's kubelet simulator) it keeps a Node alive without running
containers:

  - registers the Node (kubelet-style labels, the registration labels of its
    config) and keeps its Lease in kube-node-lease renewed (every 10 s, 40 s
    duration, as the kubelet) and its Ready condition True;
  - reports what the stand-in NVIDIA driver installed in this machine shows
    (the files the stand-in nvidia-smi reads): `nvidia.com/gpu` capacity and
    the labels NVIDIA's GPU Feature Discovery publishes (`nvidia.com/cuda.driver-
    version.*`, `nvidia.com/cuda.driver.*`, `nvidia.com/cuda.runtime-version.*`,
    `nvidia.com/gpu.product|count|memory|family`) from the *loaded* driver; with
    no driver loaded, no driver labels and 0 GPUs. Where a GPU Operator driver
    pod (label app=nvidia-driver-daemonset) runs on the node and no host driver
    is loaded, the driver is the one its image tag names, as the operator's
    driver container loads it. `nvidia.com/gpu.deploy.driver` follows the GPU
    Operator's node labelling: `pre-installed` with a host driver, else `true`
    (a user's `false` is left alone);
  - runs the pods bound to the Node as simulated pods: Running and Ready at
    once, containers "started"; gone (final delete) as soon as they are deleted
    or evicted; a pod annotated `smshare.kai/lab-run-seconds: "N"` succeeds after
    N seconds (a job that finishes);
  - on SIGTERM (the container stopping or rebooting) marks the Node NotReady,
    as a kubelet with graceful node shutdown does, and stops renewing its Lease.
    After a restart the pods still bound count as restarted containers (a
    `restartPolicy: Never` pod fails, as on a rebooted node).

Stdlib only: it runs in the lab's node image with python3 and nothing else.
Usage: node_agent.py --config /etc/smshare-node-agent/config.json
Config (JSON): node_name, apiserver, ca_file, cert_file, key_file, and
optional registration_labels, register_with_taints (as the kubelet's
flags of those names: applied when the Node is created), capacity, standin_root (a prefix for the
stand-in driver's files, for agents run outside a container), pod_ip_prefix
(three octets), state_dir, lease_seconds, status_seconds.
"""
import argparse
import datetime
import json
import os
import queue
import re
import signal
import socket
import ssl
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

AGENT = "smshare-node-agent"
KUBELET_VERSION = "v1.20.2"
LEASE_NAMESPACE = "kube-node-lease"
RUN_SECONDS_ANNOTATION = "smshare.kai/lab-run-seconds"
DRIVER_POD_LABEL = ("app", "nvidia-driver-daemonset")
DEPLOY_DRIVER_LABEL = "nvidia.com/gpu.deploy.driver"
# GFD's families by compute capability major number.
FAMILIES = {"7": "volta", "8": "ampere", "9": "hopper", "10": "blackwell"}
DEFAULT_CAPACITY = {"cpu": "64", "memory": "1056964608Ki", "pods": "110",
                    "ephemeral-storage": "1887436800Ki", "hugepages-2Mi": "0", "hugepages-1Gi": "0"}
# Labels this agent owns on the Node (reconciled on every change).
GFD_PREFIXES = ("nvidia.com/cuda.", "nvidia.com/gpu.product", "nvidia.com/gpu.count",
                "nvidia.com/gpu.memory", "nvidia.com/gpu.family", "nvidia.com/gpu.compute.")


def log(msg):
    sys.stdout.write("%s %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stdout.flush()


def rfc3339(moment=None):
    moment = moment or time.time()
    return datetime.datetime.fromtimestamp(int(moment), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def microtime(moment=None):
    moment = moment or time.time()
    return datetime.datetime.fromtimestamp(moment, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# --- what the machine shows --------------------------------------------------

def read_json(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def host_driver(root):
    """(installed library, loaded module, hardware) from the stand-in driver's files."""
    library = read_json(root + "/usr/share/nvidia-standin/driver.json")
    loaded = read_json(root + "/run/nvidia-standin/loaded.json")
    hardware = read_json(root + "/etc/nvidia-standin/gpus.json") or {}
    return library, loaded, hardware


def driver_from_pod(pod):
    """The driver version a GPU Operator driver pod loads: its image tag (615.71.09-ubuntu24.04)."""
    for container in pod.get("spec", {}).get("containers", []):
        match = re.search(r":(\d+\.\d+(?:\.\d+)?)(?:-[\w.]+)?$", container.get("image", ""))
        if match:
            return match.group(1)
    return None


def node_labels(library, loaded, hardware, operator_driver=None, current=None):
    """The labels this agent owns: {key: value or None (remove)}.

    The driver labels describe the *loaded* driver (what GPU Feature Discovery
    reads through NVML); an upgraded package not yet loaded changes nothing
    until the machine restarts."""
    current = current or {}
    wanted = {key: None for key in current if key.startswith(GFD_PREFIXES)}
    version, cuda = None, None
    if loaded and loaded.get("version"):
        version, cuda = loaded["version"], loaded.get("cuda_version")
    elif operator_driver:
        version = operator_driver
    gpus = hardware.get("gpus") or []
    if version:
        parts = (version.split(".") + ["", "", ""])[:3]
        wanted.update({
            "nvidia.com/cuda.driver-version.full": version,
            "nvidia.com/cuda.driver-version.major": parts[0],
            "nvidia.com/cuda.driver-version.minor": parts[1],
            "nvidia.com/cuda.driver-version.revision": parts[2],
            "nvidia.com/cuda.driver.major": parts[0],
            "nvidia.com/cuda.driver.minor": parts[1],
            "nvidia.com/cuda.driver.rev": parts[2],
        })
        if cuda:
            major, _sep, minor = cuda.partition(".")
            wanted.update({"nvidia.com/cuda.runtime-version.full": cuda,
                           "nvidia.com/cuda.runtime-version.major": major,
                           "nvidia.com/cuda.runtime-version.minor": minor or "0",
                           "nvidia.com/cuda.runtime.major": major,
                           "nvidia.com/cuda.runtime.minor": minor or "0"})
        if gpus:
            first = gpus[0]
            cap_major, _sep, cap_minor = str(first.get("compute_cap", "8.0")).partition(".")
            wanted.update({
                "nvidia.com/gpu.product": re.sub(r"[^A-Za-z0-9_.-]", "-", first.get("name", "unknown")),
                "nvidia.com/gpu.count": str(len(gpus)),
                "nvidia.com/gpu.memory": str(first.get("memory_total_mib", 0)),
                "nvidia.com/gpu.family": FAMILIES.get(cap_major, "unknown"),
                "nvidia.com/gpu.compute.major": cap_major,
                "nvidia.com/gpu.compute.minor": cap_minor or "0",
            })
    if gpus:
        wanted["nvidia.com/gpu.present"] = "true"
        deploy = current.get(DEPLOY_DRIVER_LABEL)
        if deploy in (None, "true", "pre-installed"):
            wanted[DEPLOY_DRIVER_LABEL] = "pre-installed" if library else "true"
    return {k: v for k, v in wanted.items() if current.get(k) != v}


def gpu_capacity(loaded, hardware, operator_driver=None):
    """GPUs the device plugin advertises: all of them once a driver is loaded."""
    if not (loaded or operator_driver):
        return 0
    return len(hardware.get("gpus") or [])


# --- pods --------------------------------------------------------------------

def pod_running_status(pod, node_ip, pod_ip, started, restarts=0):
    """The status a kubelet posts for a pod whose containers all run and are ready."""
    spec = pod.get("spec", {})
    host_network = spec.get("hostNetwork", False)
    ip = node_ip if host_network else pod_ip
    when = rfc3339(started)

    def statuses(containers, running):
        out = []
        for container in containers:
            entry = {"name": container["name"], "image": container.get("image", ""),
                     "imageID": "smshare-sim://" + container.get("image", ""),
                     "containerID": "smshare-sim://%s-%s" % (pod["metadata"]["uid"][:12], container["name"]),
                     "restartCount": restarts if running else 0}
            if running:
                entry.update(ready=True, started=True, state={"running": {"startedAt": when}})
            else:
                entry.update(ready=True, state={"terminated": {"exitCode": 0, "reason": "Completed",
                                                               "startedAt": when, "finishedAt": when}})
            out.append(entry)
        return out

    conditions = [{"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": when}
                  for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")]
    status = {"phase": "Running", "conditions": conditions, "hostIP": node_ip, "podIP": ip,
              "podIPs": [{"ip": ip}], "startTime": when, "qosClass": pod.get("status", {}).get("qosClass"),
              "containerStatuses": statuses(spec.get("containers", []), True)}
    if spec.get("initContainers"):
        status["initContainerStatuses"] = statuses(spec["initContainers"], False)
    return {k: v for k, v in status.items() if v is not None}


def pod_finished_status(pod, started, succeeded, reason):
    """The status of a pod whose containers all exited (0: Succeeded, else Failed)."""
    when, now = rfc3339(started), rfc3339()
    code = 0 if succeeded else 137
    terminated = {"exitCode": code, "reason": reason, "startedAt": when, "finishedAt": now}
    containers = [{"name": c["name"], "image": c.get("image", ""),
                   "imageID": "smshare-sim://" + c.get("image", ""),
                   "containerID": "smshare-sim://%s-%s" % (pod["metadata"]["uid"][:12], c["name"]),
                   "ready": False, "started": False, "restartCount": 0, "state": {"terminated": terminated}}
                  for c in pod.get("spec", {}).get("containers", [])]
    conditions = [{"type": "Ready", "status": "False", "reason": "PodCompleted" if succeeded else "PodFailed",
                   "lastProbeTime": None, "lastTransitionTime": now},
                  {"type": "ContainersReady", "status": "False", "lastProbeTime": None, "lastTransitionTime": now}]
    return {"phase": "Succeeded" if succeeded else "Failed", "conditions": conditions,
            "containerStatuses": containers}


def pod_phase(pod):
    return pod.get("status", {}).get("phase", "Pending")


def run_seconds(pod):
    value = pod.get("metadata", {}).get("annotations", {}).get(RUN_SECONDS_ANNOTATION)
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


# --- the API server ------------------------------------------------------------

class ApiError(Exception):
    def __init__(self, status, body):
        super().__init__("HTTP %s: %s" % (status, body[:300]))
        self.status = status


class Api:
    """Just enough of a Kubernetes client: JSON over HTTPS with a client certificate."""

    def __init__(self, server, ca_file, cert_file, key_file):
        self.server = server.rstrip("/")
        self.context = ssl.create_default_context(cafile=ca_file)
        self.context.load_cert_chain(cert_file, key_file)

    def request(self, method, path, body=None, content_type="application/json", timeout=10):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method,
                                     headers={"Content-Type": content_type, "Accept": "application/json",
                                              "User-Agent": AGENT})
        try:
            with urllib.request.urlopen(req, context=self.context, timeout=timeout) as resp:
                text = resp.read().decode()
                return json.loads(text) if text else {}
        except urllib.error.HTTPError as exc:
            raise ApiError(exc.code, exc.read().decode(errors="replace")) from exc

    def stream(self, path, timeout):
        req = urllib.request.Request(self.server + path, headers={"Accept": "application/json",
                                                                  "User-Agent": AGENT})
        return urllib.request.urlopen(req, context=self.context, timeout=timeout)


# --- the agent -------------------------------------------------------------------

class Agent:
    def __init__(self, config):
        self.config = config
        self.name = config["node_name"]
        self.root = config.get("standin_root", "")
        self.api = Api(config["apiserver"], config["ca_file"], config["cert_file"], config["key_file"])
        self.lease_seconds = float(config.get("lease_seconds", 10))
        self.status_seconds = float(config.get("status_seconds", 60))
        self.state_dir = config.get("state_dir", "/run/smshare-node-agent")
        self.events = queue.Queue()
        self.stopping = threading.Event()
        self.pods = {}          # uid -> pod (as last seen)
        self.started = {}       # uid -> start time of its simulated containers
        self.last_status = None
        self.last_status_at = 0.0
        self.last_lease_at = 0.0
        self.ready_since = rfc3339()
        self.boot_id = self._boot_id()
        self.node_ip = self._node_ip()
        self.pod_ip_prefix = config.get("pod_ip_prefix", "10.247.0")

    # identity -----------------------------------------------------------------
    def _boot_id(self):
        """A boot id that changes when the machine (container) restarts: kept in /run."""
        os.makedirs(self.state_dir, exist_ok=True)
        path = os.path.join(self.state_dir, "boot_id")
        try:
            with open(path, encoding="utf-8") as handle:
                return handle.read().strip()
        except OSError:
            value = str(uuid.uuid4())
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(value)
            return value

    def _node_ip(self):
        host = urllib.parse.urlsplit(self.config["apiserver"]).hostname
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            try:
                sock.connect((host, 443))
                return sock.getsockname()[0]
            except OSError:
                return "127.0.0.1"

    def pod_ip(self, pod):
        number = int(pod["metadata"]["uid"].replace("-", "")[:8], 16) % 250 + 2
        return "%s.%d" % (self.pod_ip_prefix, number)

    # node -----------------------------------------------------------------------
    def register(self):
        labels = {"kubernetes.io/hostname": self.name, "kubernetes.io/os": "linux",
                  "kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                  "beta.kubernetes.io/arch": "amd64"}
        labels.update(self.config.get("registration_labels") or {})
        body = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.name, "labels": labels,
                             "annotations": {"smshare.kai/node-agent": "lab stand-in (KWOK-like), not a kubelet"}},
                "spec": {"taints": self.config.get("register_with_taints") or []}}
        try:
            self.api.request("POST", "/api/v1/nodes", body)
            log("registered node %s" % self.name)
        except ApiError as exc:
            if exc.status != 409:
                raise
            log("node %s already registered" % self.name)

    def operator_driver(self):
        for pod in self.pods.values():
            labels = pod.get("metadata", {}).get("labels", {})
            if labels.get(DRIVER_POD_LABEL[0]) == DRIVER_POD_LABEL[1] and pod_phase(pod) == "Running" \
                    and not pod["metadata"].get("deletionTimestamp") and pod["metadata"]["uid"] in self.started:
                return driver_from_pod(pod)
        return None

    def node_status(self, ready=True, message=None):
        library, loaded, hardware = host_driver(self.root)
        operator = None if loaded else self.operator_driver()
        capacity = dict(DEFAULT_CAPACITY, **(self.config.get("capacity") or {}))
        capacity["nvidia.com/gpu"] = str(gpu_capacity(loaded, hardware, operator))
        now = rfc3339()
        conditions = [{"type": kind, "status": "False", "reason": "Kubelet" + reason,
                       "message": "kubelet has " + text, "lastHeartbeatTime": now,
                       "lastTransitionTime": self.ready_since}
                      for kind, reason, text in (
                          ("MemoryPressure", "HasSufficientMemory", "sufficient memory available"),
                          ("DiskPressure", "HasNoDiskPressure", "no disk pressure"),
                          ("PIDPressure", "HasSufficientPID", "sufficient PID available"))]
        conditions.append({"type": "Ready", "status": "True" if ready else "False",
                           "reason": "KubeletReady" if ready else "KubeletNotReady",
                           "message": message or "%s is posting ready status (lab stand-in)" % AGENT,
                           "lastHeartbeatTime": now, "lastTransitionTime": self.ready_since})
        return {"status": {
            "capacity": capacity, "allocatable": capacity, "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": self.node_ip},
                          {"type": "Hostname", "address": self.name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": self.boot_id.replace("-", ""), "systemUUID": self.name,
                         "bootID": self.boot_id, "kernelVersion": os.uname().release,
                         "osImage": "Debian GNU/Linux 12 (bookworm)",
                         "containerRuntimeVersion": "smshare-sim://1", "kubeletVersion": KUBELET_VERSION,
                         "kubeProxyVersion": KUBELET_VERSION, "operatingSystem": "linux",
                         "architecture": "amd64"}}}, (library, loaded, hardware, operator)

    def sync_node(self, force=False):
        body, (library, loaded, hardware, operator) = self.node_status()
        # What changed apart from the heartbeat times.
        key = json.dumps([body["status"]["capacity"], library, loaded, hardware, operator], sort_keys=True)
        if not force and key == self.last_status and time.time() - self.last_status_at < self.status_seconds:
            return
        node = self.api.request("GET", "/api/v1/nodes/" + self.name)
        changes = node_labels(library, loaded, hardware, operator, node["metadata"].get("labels", {}))
        if changes:
            self.api.request("PATCH", "/api/v1/nodes/" + self.name, {"metadata": {"labels": changes}},
                             "application/merge-patch+json")
            log("labels: %s" % ", ".join("%s=%s" % kv for kv in sorted(changes.items(), key=lambda kv: kv[0])))
        self.api.request("PATCH", "/api/v1/nodes/%s/status" % self.name, body,
                         "application/strategic-merge-patch+json")
        self.last_status, self.last_status_at = key, time.time()

    def not_ready(self, message):
        body = self.node_status(ready=False, message=message)[0]
        try:
            self.api.request("PATCH", "/api/v1/nodes/%s/status" % self.name,
                             {"status": {"conditions": body["status"]["conditions"]}},
                             "application/strategic-merge-patch+json", timeout=3)
        except (ApiError, OSError) as exc:
            log("could not post NotReady: %s" % exc)

    def renew_lease(self):
        path = "/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s" % (LEASE_NAMESPACE, self.name)
        now = microtime()
        try:
            lease = self.api.request("GET", path)
            lease["spec"].update(holderIdentity=self.name, leaseDurationSeconds=40, renewTime=now)
            self.api.request("PUT", path, lease)
        except ApiError as exc:
            if exc.status != 404:
                raise
            node = self.api.request("GET", "/api/v1/nodes/" + self.name)
            self.api.request("POST", "/apis/coordination.k8s.io/v1/namespaces/%s/leases" % LEASE_NAMESPACE, {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": LEASE_NAMESPACE,
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": self.name,
                                                  "uid": node["metadata"]["uid"]}]},
                "spec": {"holderIdentity": self.name, "leaseDurationSeconds": 40, "renewTime": now}})
        self.last_lease_at = time.time()

    # pods -------------------------------------------------------------------------
    def pods_path(self, extra=""):
        selector = urllib.parse.quote("spec.nodeName=" + self.name)
        return "/api/v1/pods?fieldSelector=%s%s" % (selector, extra)

    def watch_pods(self):
        """List, then watch, the pods bound to this node; events go to the queue."""
        while not self.stopping.is_set():
            try:
                listing = self.api.request("GET", self.pods_path())
                self.events.put(("LIST", listing.get("items", [])))
                version = listing["metadata"]["resourceVersion"]
                while not self.stopping.is_set():
                    path = self.pods_path("&watch=1&allowWatchBookmarks=true&timeoutSeconds=50"
                                          "&resourceVersion=" + version)
                    with self.api.stream(path, timeout=60) as resp:
                        for line in resp:
                            if self.stopping.is_set():
                                return
                            event = json.loads(line)
                            if event.get("type") == "ERROR":
                                raise ApiError(event["object"].get("code", 410), json.dumps(event["object"]))
                            version = event["object"]["metadata"].get("resourceVersion", version)
                            if event["type"] != "BOOKMARK":
                                self.events.put((event["type"], event["object"]))
            except (ApiError, OSError, ValueError, KeyError) as exc:
                if not self.stopping.is_set():
                    log("pod watch: %s; listing again" % exc)
                    time.sleep(1)

    def handle(self, kind, obj):
        if kind == "LIST":
            seen = {pod["metadata"]["uid"]: pod for pod in obj}
            for uid in set(self.pods) - set(seen):
                self.pods.pop(uid, None)
                self.started.pop(uid, None)
            self.pods.update(seen)
            for pod in seen.values():
                self.sync_pod(pod, after_restart=True)
            return
        uid = obj["metadata"]["uid"]
        if kind == "DELETED":
            self.pods.pop(uid, None)
            self.started.pop(uid, None)
            return
        self.pods[uid] = obj
        self.sync_pod(obj)

    def pod_path(self, pod, sub=""):
        meta = pod["metadata"]
        return "/api/v1/namespaces/%s/pods/%s%s" % (meta["namespace"], meta["name"], sub)

    def sync_pod(self, pod, after_restart=False):
        meta, uid = pod["metadata"], pod["metadata"]["uid"]
        try:
            if meta.get("deletionTimestamp"):
                # The simulated containers stop at once; the kubelet's final delete.
                self.api.request("DELETE", self.pod_path(pod), {
                    "apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                    "preconditions": {"uid": uid}})
                self.started.pop(uid, None)
                return
            phase = pod_phase(pod)
            if phase in ("Succeeded", "Failed") or uid in self.started:
                return
            restarts = 0
            if phase == "Running" and after_restart:
                # Bound before this agent (re)started: the machine restarted under it.
                if pod["spec"].get("restartPolicy", "Always") == "Never":
                    self.api.request("PATCH", self.pod_path(pod, "/status"),
                                     {"status": pod_finished_status(pod, time.time(), False, "NodeRestarted")},
                                     "application/strategic-merge-patch+json")
                    return
                restarts = max([c.get("restartCount", 0)
                                for c in pod.get("status", {}).get("containerStatuses", [])] or [0]) + 1
            started = time.time()
            self.api.request("PATCH", self.pod_path(pod, "/status"),
                             {"status": pod_running_status(pod, self.node_ip, self.pod_ip(pod), started, restarts)},
                             "application/strategic-merge-patch+json")
            self.started[uid] = started
            log("pod %s/%s running" % (meta["namespace"], meta["name"]))
        except ApiError as exc:
            if exc.status not in (404, 409):
                log("pod %s/%s: %s" % (meta["namespace"], meta["name"], exc))

    def finish_jobs(self):
        now = time.time()
        for uid, started in list(self.started.items()):
            pod = self.pods.get(uid)
            seconds = run_seconds(pod) if pod else None
            if seconds is None or now - started < seconds:
                continue
            try:
                self.api.request("PATCH", self.pod_path(pod, "/status"),
                                 {"status": pod_finished_status(pod, started, True, "Completed")},
                                 "application/strategic-merge-patch+json")
                log("pod %s/%s completed" % (pod["metadata"]["namespace"], pod["metadata"]["name"]))
            except ApiError as exc:
                log("pod %s: %s" % (pod["metadata"]["name"], exc))
            self.started.pop(uid, None)

    # main loop ---------------------------------------------------------------------
    def run(self):
        while not self.stopping.is_set():
            try:
                self.register()
                self.sync_node(force=True)
                self.renew_lease()
                break
            except (ApiError, OSError) as exc:
                log("cannot reach the API server yet: %s" % exc)
                self.stopping.wait(2)
        watcher = threading.Thread(target=self.watch_pods, name="pod-watch", daemon=True)
        watcher.start()
        while not self.stopping.is_set():
            try:
                kind, obj = self.events.get(timeout=1)
                self.handle(kind, obj)
                while not self.events.empty():
                    self.handle(*self.events.get_nowait())
            except queue.Empty:
                pass
            try:
                self.finish_jobs()
                self.sync_node()
                if time.time() - self.last_lease_at >= self.lease_seconds:
                    self.renew_lease()
            except (ApiError, OSError) as exc:
                log("sync: %s" % exc)
        self.not_ready("%s stopped: the machine is shutting down or restarting" % AGENT)
        log("stopped")

    def stop(self, *_args):
        self.stopping.set()


def main(argv=None):
    parser = argparse.ArgumentParser(description="STAND-IN kubelet simulator for the smshare lab")
    parser.add_argument("--config", default="/etc/smshare-node-agent/config.json")
    args = parser.parse_args(argv)
    with open(args.config, encoding="utf-8") as handle:
        config = json.load(handle)
    agent = Agent(config)
    signal.signal(signal.SIGTERM, agent.stop)
    signal.signal(signal.SIGINT, agent.stop)
    agent.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
