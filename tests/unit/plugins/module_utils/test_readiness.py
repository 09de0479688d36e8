"""The cluster roles' wait predicates ({ok, rows, message}) over composed API objects
(fixtures/readiness/). The expected messages are the ones the roles printed when each
wait and its check were written in Jinja (white space folded), so a lab test that
greps them still finds them."""
import json
from pathlib import Path

import pytest

from ansible_collections.smshare.kai.plugins.module_utils import fractioning_checks
from ansible_collections.smshare.kai.plugins.module_utils import readiness

OBJECTS = json.loads((Path(__file__).parent / "fixtures" / "readiness" / "objects.json").read_text())
KAI_HINT = "(image pulls need the registry reachable from the nodes and the pull secret)"
SOCKETS = ("/run/containerd/containerd.sock", "/var/run/nri/nri.sock")
SETTINGS = {"mpsd_memory_limit": "", "nri_socket_path": SOCKETS[1], "cri_socket_path": SOCKETS[0],
            "gpu_operator_minimum_version": "v26.7.1"}
MIXED = ["deployment_available", "deployment_unavailable", "deployment_rolling", "deployment_stale"]
NOT_AVAILABLE = ("Not Available after 300 s: binder: Available=False (MinimumReplicasUnavailable: Deployment does not "
                 "have minimum availability.); scheduler: rollout in progress: 1 of 2 replicas updated, 2 available; "
                 "queue-controller: the controller has not observed the latest spec yet. ")
SOCKET_ADVICE = ("A mismatch usually means a node failed the NRI or CRI socket check: compare "
                 "/run/containerd/containerd.sock and /var/run/nri/nri.sock with those nodes (run the preflight play) "
                 "and read the pod's logs (kubectl -n gpu-fractioning logs POD).")
NO_NODE = ("(no node matches: the daemons run on nodes labelled nvidia.com/gpu.deploy.client=true whose "
           "nvidia.com/gpu-driver-upgrade-state is unset or upgrade-done)")
UNSUPPORTED = ("GpuFractioningConfig default is not Ready after 300 s: Ready=False (GPUOperatorVersionUnsupported: GPU "
               "Operator v26.7.0 is below the minimum v26.7.1). GpuFractioningConfig default is not Ready: "
               "GPUOperatorVersionUnsupported (GPU Operator v26.7.0 is below the minimum v26.7.1). The chart's "
               "gpuOperator.minimumVersion (gpu_fractioning_gpu_operator_minimum_version, "
               "smshare_gpu_operator_minimum_version, now %s) is above the cluster's GPU Operator: upgrade the GPU "
               "Operator to it, or set v26.7.0 to run with the MPS-only memory cap (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, "
               "which a process in the container can change), or \"\" to skip the check.")
DEPS = ("kai-config reports DependenciesFulfilled=%s after 300 s, although GpuFractioningConfig default is Ready. "
        "Read the kai-operator logs; set gpu_fractioning_check_kai_config=false where KAI-Scheduler is managed "
        "elsewhere.")
DRIVER_PODS = ("After 900 s no ready driver pod of 615.71.09 runs on %s. See `kubectl -n gpu-operator get pods -l "
               "app=nvidia-driver-daemonset -o wide` and the pods' events: the driver image (%s/driver:615.71.09-<os>) "
               "must exist for the nodes' OS, and the driver must build for their kernel.")


def objs(*names):
    return [OBJECTS[name] for name in names]


def one(name):
    return OBJECTS[name]


def shape(found):
    """(ok, message) of a predicate's result, which has exactly ok, rows and message."""
    assert set(found) == {"ok", "rows", "message"} and isinstance(found["rows"], list)
    return found["ok"], found["message"]


@pytest.mark.parametrize("deployments, namespace, hint, ok, message", [
    ([], "kai-scheduler", KAI_HINT, False,
     "No deployment in namespace kai-scheduler. Look at the pods: kubectl -n kai-scheduler get pods; kubectl -n "
     "kai-scheduler describe pod POD (image pulls need the registry reachable from the nodes and the pull secret)."),
    (MIXED, "kai-scheduler", KAI_HINT, False, NOT_AVAILABLE +
     "Look at the pods: kubectl -n kai-scheduler get pods; kubectl -n kai-scheduler describe pod POD (image pulls "
     "need the registry reachable from the nodes and the pull secret)."),
    ([], "gpu-fractioning", "", False,
     "No deployment in namespace gpu-fractioning. Look at the pods: kubectl -n gpu-fractioning get pods; kubectl -n "
     "gpu-fractioning describe pod POD."),
    (MIXED, "gpu-fractioning", "", False, NOT_AVAILABLE +
     "Look at the pods: kubectl -n gpu-fractioning get pods; kubectl -n gpu-fractioning describe pod POD."),
    (["deployment_available", "deployment_available_2"], "kai-scheduler", KAI_HINT, True,
     "2 deployments Available: kai-operator, binder"),
], ids=["kai-none", "kai-mixed", "frac-none", "frac-mixed", "ok"])
def test_deployments_available(deployments, namespace, hint, ok, message):
    found = readiness.deployments_available(objs(*deployments), namespace, 300, hint)
    assert shape(found) == (ok, message)
    assert [r["name"] for r in found["rows"]] == [one(d)["metadata"]["name"] for d in deployments]


def _pod(name, owner, uid, *waiting, init=()):
    statuses = [{"name": c, "state": {"waiting": {"reason": r, "message": m}}} for c, r, m in waiting]
    return {"metadata": {"name": name, "uid": uid, "ownerReferences": [{"kind": "ReplicaSet", "name": owner}]},
            "status": {"containerStatuses": statuses,
                       "initContainerStatuses": [{"name": c, "state": {"waiting": {"reason": r, "message": m}}}
                                                 for c, r, m in init]}}


def _event(pod, uid, reason, message, count=1):
    return {"involvedObject": {"kind": "Pod", "name": pod, "uid": uid}, "reason": reason, "message": message,
            "count": count}


BACK_OFF = 'Back-off pulling image "registry.lab:5000/kai/binder:v1"'
ANSWER = ('Failed to pull image "registry.lab:5000/kai/binder:v1": unexpected status from GET request: '
          '500 Internal Server Error')


# Once the wait has failed, the role reads the namespace's pods and events: a container that
# waits on a pull is named with the registry's answer from the pod's own last failed pull.
def test_deployments_available_names_the_pulls_that_fail():
    pods = [_pod("binder-7c9d-x1", "binder-7c9d", "u1", ("binder", "ImagePullBackOff", BACK_OFF)),
            # the scheduler's new pod: its init container cannot be pulled either (no event yet)
            _pod("scheduler-5f-a", "scheduler-5f", "u2", init=[("wait", "ErrImagePull", "401 Unauthorized")]),
            # an Available deployment's pod, and a running one: not named
            _pod("kai-operator-6b-z", "kai-operator-6b", "u3", ("operator", "ImagePullBackOff", "other")),
            _pod("binder-7c9d-x2", "binder-7c9d", "u4")]
    events = [_event("binder-7c9d-x1", "u1", "Failed", ANSWER, 2),
              _event("binder-7c9d-x1", "u1", "Failed", "Error: ImagePullBackOff", 3),
              # the same name's earlier pod, and another kind of object of that name
              _event("binder-7c9d-x1", "old", "Failed", "Failed to pull image: 404 Not Found"),
              {"involvedObject": {"kind": "ReplicaSet", "name": "binder-7c9d-x1"}, "reason": "Failed",
               "message": "Failed to pull image: elsewhere"}]
    found = readiness.deployments_available(objs(*MIXED), "kai-scheduler", 300, "", pods, events)
    assert not found["ok"]
    assert found["message"] == NOT_AVAILABLE.rstrip() + (
        " Image pulls fail: pod binder-7c9d-x1 container binder: ImagePullBackOff %s; last failed pull: %s "
        "(failed pulls: 5); pod scheduler-5f-a container wait: ErrImagePull 401 Unauthorized (failed pulls: 0). "
        "Check the image and its tag, that the nodes reach the registry (its certificate, the pull secret's "
        "login), and the registry itself; the kubelet retries the pull, so run again once it is fixed. Look at "
        "the pods: kubectl -n kai-scheduler get pods; kubectl -n kai-scheduler describe pod POD." % (BACK_OFF, ANSWER))
    # Without pods (before the wait failed) or with none failing: the message as before.
    assert readiness.deployments_available(objs(*MIXED), "kai-scheduler", 300, "", pods[2:], events)["message"] \
        == readiness.deployments_available(objs(*MIXED), "kai-scheduler", 300)["message"]


@pytest.mark.parametrize("configs, ok, message", [
    ([], False, "kai-config (kai.scheduler/v1 Config) does not exist after 300 s: the chart's post-install hook "
                "applies it. Read the hook job's logs in kai-scheduler and `helm status kai-scheduler -n "
                "kai-scheduler`."),
    (["kai_config_deploying"], False,
     "kai-config does not report Deployed=True after 300 s (Deployed=False (deploying: Resources not deployed yet), "
     "DependenciesFulfilled=False (dependencies_missing: binder is missing GpuFractioningConfig not found)). Read the "
     "kai-operator logs: kubectl -n kai-scheduler logs deploy/kai-operator."),
    (["kai_config_without_deployed"], False,
     "kai-config does not report Deployed=True after 300 s (DependenciesFulfilled=True (dependencies_met)). Read the "
     "kai-operator logs: kubectl -n kai-scheduler logs deploy/kai-operator."),
    (["kai_config_without_conditions"], False,
     "kai-config does not report Deployed=True after 300 s (no conditions). Read the kai-operator logs: kubectl -n "
     "kai-scheduler logs deploy/kai-operator."),
    (["kai_config_deployed"], True, "kai-config reports Deployed=True"),
])
def test_kai_config_deployed(configs, ok, message):
    found = readiness.kai_config_deployed(objs(*configs), "kai-scheduler", "kai-scheduler", 300)
    assert shape(found) == (ok, message)


@pytest.mark.parametrize("configs, ok, message", [
    ([], False, DEPS % "missing (: kai-config not found)"),
    (["kai_config_without_conditions"], False, DEPS % "missing (: kai-config not found)"),
    (["kai_config_deploying"], False,
     DEPS % "False (dependencies_missing: binder is missing GpuFractioningConfig not found)"),
    (["kai_config_deployed"], True, "kai-config reports DependenciesFulfilled=True"),
])
def test_kai_config_dependencies(configs, ok, message):
    found = readiness.kai_config_dependencies(objs(*configs), 300)
    assert shape(found) == (ok, message)
    assert [r["type"] for r in found["rows"]] == [c["type"] for name in configs
                                                  for c in one(name)["status"]["conditions"]]


MODE_WRONG = "kai-config reports gpuSharingMode %s, not NvFractions: the release values did not reach the Config."
DEPS_WRONG = ('kai-config reports DependenciesFulfilled=%s. Only "GpuFractioningConfig not found" is expected before '
              "the gpu_fractioning role runs; fix what it names.")


def with_sharing(name, mode=None, deps=None):
    """One of the composed configs, its sharing mode and DependenciesFulfilled condition replaced."""
    config = json.loads(json.dumps(one(name)))
    if mode is not None:
        config["spec"]["global"]["gpuSharingMode"] = mode
    if deps is not None:
        config["status"]["conditions"] = [c for c in config["status"]["conditions"]
                                          if c["type"] != "DependenciesFulfilled"] + deps
    return config


@pytest.mark.parametrize("config, ok, message", [
    (with_sharing("kai_config_deployed"), True, "kai-config: gpuSharingMode NvFractions, DependenciesFulfilled=True"),
    # Before the gpu_fractioning role: the one expected reason.
    (with_sharing("kai_config_deploying"), True,
     "kai-config: gpuSharingMode NvFractions, DependenciesFulfilled=False (GpuFractioningConfig not found: expected "
     "until the gpu_fractioning role ran)"),
    # The trap the guide names: the mode is case-sensitive.
    (with_sharing("kai_config_deployed", mode="nvfractions"), False, MODE_WRONG % "nvfractions"),
    (with_sharing("kai_config_deployed", mode=""), False, MODE_WRONG % "(unset)"),
    (with_sharing("kai_config_deployed", deps=[{"type": "DependenciesFulfilled", "status": "False",
                                                "reason": "dependencies_missing", "message": "binder not ready"}]),
     False, DEPS_WRONG % "False (dependencies_missing: binder not ready)"),
    (with_sharing("kai_config_deployed", mode="MPS", deps=[]), False,
     MODE_WRONG % "MPS" + " " + DEPS_WRONG % "missing (: )"),
    (None, False, MODE_WRONG % "(unset)" + " " + DEPS_WRONG % "missing (: )"),
])
def test_kai_config_sharing(config, ok, message):
    found = readiness.kai_config_sharing([config] if config else [], "NvFractions")
    assert shape(found) == (ok, message)


CREATED = ("After 300 s namespace gpu-fractioning has no DaemonSet for %s of the current GpuFractioningConfig default "
           "(found: %s). The operator creates them: read its logs (kubectl -n gpu-fractioning logs deploy/%s) and the "
           "GpuFractioningConfig's conditions.")


@pytest.mark.parametrize("daemonsets, config, operators, ok, message", [
    ([], "frac_config_ready", [], False, CREATED % ("mpsd, fractiond", "none", "OPERATOR")),
    (["ds_mpsd_ready"], "frac_config_ready", ["deployment_operator"], False,
     CREATED % ("fractiond", "gpu-fractioning-mpsd", "gpu-fractioning-operator")),
    # The old config's DaemonSet (another owner) and one being deleted do not count.
    (["ds_mpsd_old_config", "ds_fractiond_ready"], "frac_config_ready", ["deployment_operator"], False,
     CREATED % ("mpsd", "gpu-fractioning-mpsd, gpu-fractioning-fractiond", "gpu-fractioning-operator")),
    (["ds_mpsd_deleting", "ds_fractiond_ready"], "frac_config_ready", ["deployment_operator"], False,
     CREATED % ("mpsd", "gpu-fractioning-mpsd, gpu-fractioning-fractiond", "gpu-fractioning-operator")),
    # Without the config every DaemonSet not being deleted counts.
    (["ds_mpsd_old_config", "ds_fractiond_ready"], None, ["deployment_operator"], True,
     "DaemonSets of GpuFractioningConfig default: gpu-fractioning-mpsd, gpu-fractioning-fractiond"),
    (["ds_mpsd_ready", "ds_fractiond_not_ready"], "frac_config_ready", [], True,
     "DaemonSets of GpuFractioningConfig default: gpu-fractioning-mpsd, gpu-fractioning-fractiond"),
])
def test_fractioning_daemonsets_created(daemonsets, config, operators, ok, message):
    found = readiness.fractioning_daemonsets_created(objs(*daemonsets), one(config) if config else None,
                                                     ["mpsd", "fractiond"], "gpu-fractioning", 300, objs(*operators))
    assert shape(found) == (ok, message)


@pytest.mark.parametrize("daemonsets, pods, logs, ok, message", [
    (["ds_mpsd_ready", "ds_fractiond_ready"], ["pod_mpsd_ready", "pod_fractiond_ready"], [], True,
     "2 DaemonSets ready: gpu-fractioning-mpsd 1/1, gpu-fractioning-fractiond 1/1"),
    (["ds_mpsd_none_ready", "ds_fractiond_ready"], ["pod_mpsd_oom", "pod_fractiond_ready"], ["log_mpsd_oom"], False,
     "DaemonSet gpu-fractioning-mpsd: 0/1 ready; not ready on gpu-01: gpu-fractioning-mpsd-abc (mpsd CrashLoopBackOff). "
     "mpsd pod gpu-fractioning-mpsd-abc on gpu-01 exits with CUDA_ERROR_OUT_OF_MEMORY: its host-memory limit (256Mi) "
     "is too small for the node's GPUs, not GPU memory; raise mpsDaemon.resources.limits.memory "
     "(gpu_fractioning_mpsd_memory_limit, smshare_mpsd_memory_limit): about 50 MiB per GPU (gpu-01 has 8 GPUs: at "
     "least 400 MiB, 512Mi with headroom)."),
    (["ds_mpsd_half_ready_of_2", "ds_fractiond_no_node"], ["pod_mpsd_ready"], [], False,
     "DaemonSet gpu-fractioning-mpsd: 1/2 ready; 1 pod(s) not created. DaemonSet gpu-fractioning-fractiond: 0/0 ready "
     + NO_NODE + ". " + SOCKET_ADVICE),
    (["ds_mpsd_none_ready_of_2", "ds_fractiond_not_ready"],
     ["pod_mpsd_crashloop", "pod_mpsd_image_pull", "pod_fractiond_creating"], [], False,
     "DaemonSet gpu-fractioning-mpsd: 0/2 ready; not ready on gpu-01: gpu-fractioning-mpsd-a (mpsd CrashLoopBackOff); "
     "not ready on gpu-02: gpu-fractioning-mpsd-b (mpsd ImagePullBackOff). DaemonSet gpu-fractioning-fractiond: 0/1 "
     "ready; not ready on gpu-01: gpu-fractioning-fractiond-a (fractiond ContainerCreating). " + SOCKET_ADVICE),
    # desired == ready, but a pod is not ready: the check (pods read) fails where the wait (no pods yet) ends.
    (["ds_mpsd_ready"], ["pod_mpsd_crashloop"], [], False,
     "DaemonSet gpu-fractioning-mpsd: 1/1 ready; not ready on gpu-01: gpu-fractioning-mpsd-a (mpsd CrashLoopBackOff). "
     + SOCKET_ADVICE),
    ([], [], [], False, "No DaemonSet of the current GpuFractioningConfig default in namespace gpu-fractioning. "
     + SOCKET_ADVICE),
], ids=["ready", "oom", "no-node-and-missing", "two-bad", "pod-not-ready", "none"])
def test_fractioning_daemonsets_ready(daemonsets, pods, logs, ok, message):
    symptoms = fractioning_checks.symptoms(objs(*logs), None, SETTINGS, objs("node_gpu_01_ready"))
    found = readiness.fractioning_daemonsets_ready(objs(*daemonsets), one("frac_config_ready"), objs(*pods), symptoms,
                                                   "gpu-fractioning", *SOCKETS)
    assert shape(found) == (ok, message)
    assert [r["name"] for r in found["rows"]] == [one(d)["metadata"]["name"] for d in daemonsets]


def test_the_daemonsets_wait_decides_on_the_counts_until_the_pods_are_read():
    found = readiness.fractioning_daemonsets_ready(objs("ds_mpsd_ready"), one("frac_config_ready"), [], [],
                                                   "gpu-fractioning", *SOCKETS)
    assert found["ok"]


@pytest.mark.parametrize("configs, minimum, ok, message", [
    ([], "v26.7.1", False,
     "GpuFractioningConfig default does not exist: the chart's post-install hook creates it. Run the role again or "
     "check `helm get hooks gpu-fractioning -n gpu-fractioning`."),
    (["frac_config_daemons_not_ready"], "v26.7.1", False,
     "GpuFractioningConfig default is not Ready after 300 s: Ready=False (DaemonsNotReady: mpsd: 0/1 ready). The "
     "condition that is False names the failing daemon: read its pods' logs."),
    (["frac_config_without_conditions"], "v26.7.1", False,
     "GpuFractioningConfig default is not Ready after 300 s: no conditions. The condition that is False names the "
     "failing daemon: read its pods' logs."),
    (["frac_config_operator_unsupported"], "v26.7.1", False, UNSUPPORTED % "v26.7.1"),
    (["frac_config_operator_unsupported"], "v25.1.0", False, UNSUPPORTED % "v25.1.0"),
    (["frac_config_ready"], "v26.7.1", True, "GpuFractioningConfig default is Ready"),
])
def test_fractioning_config_ready(configs, minimum, ok, message):
    found = readiness.fractioning_config_ready(objs(*configs), "gpu-fractioning", "gpu-fractioning", 300,
                                               dict(SETTINGS, gpu_operator_minimum_version=minimum))
    assert shape(found) == (ok, message)


@pytest.mark.parametrize("nodes, config, ok, message", [
    ([], "frac_config_ready", False,
     "No node matches the config's nodeSelector {\"nvidia.com/gpu.present\": \"true\"}: label the GPU nodes."),
    ([], "frac_config_without_selector", False, "No node matches the config's nodeSelector {}: label the GPU nodes."),
    (["node_gpu_01_ready", "node_gpu_02_not_ready", "node_gpu_03_unreported"], "frac_config_ready", False,
     "Not ready for fractions after 300 s: gpu-02 False mpsd not ready; gpu-03 missing. Fractional pods are not "
     "scheduled there: read the mpsd and fractiond pods' logs on those nodes."),
    (["node_gpu_01_ready", "node_gpu_02_ready"], "frac_config_ready", True,
     "2 node(s) report gpu-fractioning.nvidia.com/Ready=True: gpu-01, gpu-02"),
])
def test_fractioning_nodes_ready(nodes, config, ok, message):
    found = readiness.fractioning_nodes_ready(objs(*nodes), one(config), 300)
    assert shape(found) == (ok, message)
    assert [r["node"] for r in found["rows"]] == [one(n)["metadata"]["name"] for n in nodes]


@pytest.mark.parametrize("targets, ready, repository, ok, message", [
    (["gpu-01", "gpu-02", "gpu-03"], ["gpu-01"], "", False, DRIVER_PODS % ("gpu-02, gpu-03", "nvcr.io/nvidia")),
    (["gpu-01", "gpu-02"], [], "harbor.corp/nvidia", False, DRIVER_PODS % ("gpu-01, gpu-02", "harbor.corp/nvidia")),
    (["gpu-01", "gpu-02"], ["gpu-02", "gpu-01", "gpu-09"], "", True, "A ready driver pod of 615.71.09 on gpu-01, gpu-02"),
])
def test_driver_pods_ready(targets, ready, repository, ok, message):
    found = readiness.driver_pods_ready(targets, ready, "615.71.09", "gpu-operator", 900, repository)
    assert shape(found) == (ok, message)
    assert found["rows"] == [{"node": t, "ok": t in ready} for t in targets]


@pytest.mark.parametrize("targets, nodes, ok, message", [
    (["gpu-01", "gpu-02", "gpu-03"], ["node_gpu_02_ready"], False,
     "gpu-01, gpu-03 run the driver pod but do not report driver 615.71.09 (label "
     "nvidia.com/cuda.driver-version.full): GPU Feature Discovery has not seen it loaded. Check the node's "
     "gpu-feature-discovery pod and `nvidia-smi` in the driver container."),
    (["gpu-01", "gpu-02"], ["node_gpu_01_ready", "node_gpu_02_ready", "node_gpu_03_unreported"], True,
     "Driver 615.71.09 on gpu-01, gpu-02"),
])
def test_driver_reported(targets, nodes, ok, message):
    found = readiness.driver_reported(targets, objs(*nodes), "615.71.09")
    assert shape(found) == (ok, message)


@pytest.mark.parametrize("pods, ok, message", [
    (["mpsd_pod_gpu_01", "mpsd_pod_gpu_02"], False,
     "2 mpsd pod(s) still run 180 s after the config was deleted: gpu-fractioning-mpsd-a on gpu-01, "
     "gpu-fractioning-mpsd-b on gpu-02. MPS stays on those GPUs while they run. Run uninstall again to keep waiting "
     "(they take about a minute), or look at `kubectl -n gpu-fractioning describe pod POD`. The releases were not "
     "uninstalled."),
    ([], True, "No mpsd pod is left"),
])
def test_mpsd_pods_gone(pods, ok, message):
    found = readiness.mpsd_pods_gone(objs(*pods), "gpu-fractioning", 180)
    assert shape(found) == (ok, message)
    assert found["rows"] == [{"pod": one(p)["metadata"]["name"], "node": one(p)["spec"]["nodeName"]} for p in pods]
