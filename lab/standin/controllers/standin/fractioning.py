"""STAND-IN (lab only): the gpu-fractioning fork's operator and node daemons.

The operator owns GpuFractioningConfig `default`: finalizer, the mpsd and
fractiond (+ metricsd) DaemonSets a few seconds after it starts, the config's
conditions, each node's gpu-fractioning.nvidia.com/Ready condition, and the
clean-up on deletion. Names, labels, reasons and messages are upstream's
(lab/standin/charts/CONTRACT.md).
"""
import hashlib
import json
import os
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
    pod["terminationGracePeriodSeconds"] = 75
    image, policy = image_from_env("MPSD")
    mps = spec.get("mpsDaemon") or {}
    args = []
    if mps.get("gracefulStopDelay"):
        args += ["--graceful-stop-delay", mps["gracefulStopDelay"]]
    probe = {"exec": {"command": ["test", "-S", f"{MPS_PIPE}/control"]}, "initialDelaySeconds": 1, "periodSeconds": 2}
    pod["containers"].append({
        "name": "mpsd", "image": image, "imagePullPolicy": policy, "args": args,
        "securityContext": {"privileged": True}, "readinessProbe": probe,
        # The MPS folders, for the daemon and for `kubectl exec ... nvidia-cuda-mps-control`.
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "CUDA_MPS_PIPE_DIRECTORY", "value": MPS_PIPE},
                {"name": "CUDA_MPS_LOG_DIRECTORY", "value": MPS_LOG},
                {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"},
                {"name": "MPS_MEMACCT_AUDIT_LOG", "value": os.environ.get("MPSD_AUDIT_LOG", "true")},
                {"name": "MPS_SUPPORT_SM_SHARING", "value": os.environ.get("SUPPORT_SM_SHARING", "true")}],
        "volumeMounts": [{"name": "mps-pipe", "mountPath": MPS_PIPE}, {"name": "mps-log", "mountPath": MPS_LOG}],
    })
    pod["volumes"] = [{"name": "mps-pipe", **host_path(host_root, MPS_PIPE)},
                      {"name": "mps-log", **host_path(host_root, MPS_LOG)}]
    return ds


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


class Operator:
    def __init__(self):
        self.kube, self.stop = Kube(), Stop()
        self.namespace = os.environ.get("POD_NAMESPACE") or self.kube.namespace()
        self.started = time.monotonic()
        self.applied = {}
        self.knobs = {}

    def run(self):
        serve_health(8081)
        log("starting gpu-fractioning operator (stand-in)", namespace=self.namespace)
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
        new = daemons + [ready_condition(daemons, gen, old), upgrade]
        if not same_conditions(old, new) or (config.get("status") or {}).get("observedGeneration") != gen:
            self.kube.merge_patch(CONFIG + "/status", {"status": {"conditions": new, "observedGeneration": gen}})
            log("status updated", conditions={c["type"]: c["status"] for c in new})

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

MPS_CONFIG = "/etc/nvidia-mps/mps-control.toml"


def mps_config():
    """The MPS v3 control-daemon config: server `shared` whose default namespace
    is capped at 10 % (defense in depth for a pod handed the server's pipe folder)."""
    return ("# Generated by mpsd (stand-in).\n[servers.shared]\nuid = 0\n\n"
            "[servers.shared.namespaces.default]\nactive_thread_percentage = 10\n")


def mpsd(argv):
    kube, stop = Kube(), Stop()
    the_knobs = knobs(kube)
    log("mpsd (stand-in) starting", node=os.environ.get("NODE_NAME", ""))
    if the_knobs.get("mpsd.not-ready") == "true":
        log("lab knob mpsd.not-ready: not starting the MPS control daemon")
        while stop.sleep(3600):
            pass
        return 0
    os.makedirs(os.path.dirname(MPS_CONFIG), exist_ok=True)
    with open(MPS_CONFIG, "w") as handle:
        handle.write(mps_config())
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=MPS_PIPE, CUDA_MPS_LOG_DIRECTORY=MPS_LOG)
    argv = ["nvidia-cuda-mps-control", "-p", "3"]
    if the_knobs.get("mpsd.multiuser", "true") != "false":
        argv.append("-m")
    argv += ["-f", "-a", MPS_CONFIG]
    log("starting the MPS control daemon", command=" ".join(argv))
    daemon = subprocess.Popen(argv, env=env)
    ignore_flag = os.path.join(MPS_PIPE, "standin-ignore-cap")
    while stop.sleep(1):
        if daemon.poll() is not None:
            log("the MPS control daemon exited", rc=daemon.returncode)
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
    log("stopping: quitting MPS")
    subprocess.run(["nvidia-cuda-mps-control", "-q"], env=env, check=False)
    try:
        daemon.wait(timeout=10)
    except subprocess.TimeoutExpired:
        daemon.kill()
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
    log("fractiond (stand-in) starting", nri_socket=nri, cri_socket=options.get("cri-socket", CRI_SOCKET))
    last = None
    while True:
        registered = socket_connectable(nri)
        forced = knobs(kube).get("fractiond.not-ready") == "true"
        ready = registered and not forced
        if ready != last:
            if not registered:
                log(f"NRI socket {nri} not available; retrying")
            elif forced:
                log("lab knob fractiond.not-ready: reporting not ready")
            else:
                log("registered with NRI; synchronized", socket=nri)
            last = ready
        state["ready"] = ready
        if not stop.sleep(2):
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
        Operator().run()
        return 0
    return {"mpsd": mpsd, "fractiond": fractiond, "metricsd": metricsd}[image](argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
