# Apache-2.0
"""A fork's release verified in one pass (module_utils/release_verify.py), over both
releases converged on the lab and read from it (fixtures/release_verify/converged.json:
the objects, mpsd's two logs and the image manifest; record.py wrote it) and broken
one way at a time. A fake clock: each wait's polls and timeout are counted, not slept."""
import copy
import json
from pathlib import Path

from ansible_collections.smshare.kai.plugins.module_utils import release_verify
from ansible_collections.smshare.kai.plugins.module_utils.release_verify import ReadError, verify

CONVERGED = json.loads((Path(__file__).parent / "fixtures" / "release_verify" / "converged.json").read_text())
API = "gpu-fractioning.kai.scheduler/v1alpha1"
REGISTRY = "127.0.0.1:5443/kai-fork"
BASE = REGISTRY + "/kai-gpu-fractioning"
KAI = {"chart": "kai-scheduler", "namespace": "kai-scheduler", "release": "kai-scheduler", "timeout": 30,
       "poll_interval": 5, "deployments_hint": "(image pulls need the registry reachable from the nodes and the pull "
       "secret)", "image_base": REGISTRY + "/kai-scheduler", "tag": CONVERGED["manifest"]["tag"],
       "manifest": CONVERGED["manifest"], "image_manifest_path": "/var/tmp/smshare/fork_images_manifest.json",
       "gpu_sharing_mode": "NvFractions"}
SETTINGS = {
    "chart": "gpu-fractioning", "namespace": "gpu-fractioning", "release": "gpu-fractioning", "timeout": 30, "poll_interval": 5,
    "components": ["mpsd", "fractiond"], "cri_socket_path": "/run/containerd/containerd.sock",
    "nri_socket_path": "/var/run/nri/nri.sock", "node_selector": "nvidia.com/gpu.present=true",
    "failure_log_lines": 50, "mps_control_log": "/var/log/nvidia-mps/control.log",
    "mps_start_pattern": "Starting control daemon", "default_namespace_percentage": 10,
    "image_base": BASE, "tag": CONVERGED["manifest"]["tag"], "manifest": CONVERGED["manifest"],
    "image_manifest_path": "/var/tmp/smshare/fork_images_manifest.json", "check_kai_config": True,
    "symptom_settings": {"mpsd_memory_limit": "", "nri_socket_path": "/var/run/nri/nri.sock",
                         "cri_socket_path": "/run/containerd/containerd.sock",
                         "gpu_operator_minimum_version": "v26.7.1"},
}


def _matches(obj, selector):
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in (term.split("=", 1) for term in (selector or "").split(",") if term))


class Lab(object):
    """The reads over a copy of the recorded release; `states` replaces it after each read
    of a kind (a release settling over the polls), `fail` makes reads fail."""

    def __init__(self, **changes):
        self.objects = copy.deepcopy(CONVERGED)
        self.objects.update(changes)
        self.api = API
        self.reads, self.calls, self.logs, self.execs = [], [], [], []
        self.fail = set()
        self.states = {}        # kind -> [objects per read]; the last one stays
        self.now = 0.0

    # the clock
    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds

    # the reader
    def api_version_of(self, kind):
        assert kind == "GpuFractioningConfig"
        return self.api

    def list(self, api_version, kind, namespace=None, name=None, label_selector=None):
        self.reads.append(kind)
        self.calls.append((api_version, kind, namespace, name, label_selector))
        if kind in self.fail:
            raise ReadError("reading %s: connection refused" % kind)
        if kind in self.states:
            found = self.states[kind][0] if len(self.states[kind]) == 1 else self.states[kind].pop(0)
        else:
            kai = namespace == "kai-scheduler"
            found = {"GpuFractioningConfig": [self.objects["config"]] if self.objects["config"] else [],
                     "DaemonSet": self.objects["daemonsets"],
                     "Pod": self.objects["kai_pods" if kai else "pods"], "Node": self.objects["nodes"],
                     "Deployment": self.objects["kai_deployments" if kai else "deployments"], "Event": [],
                     "Config": [self.objects["kai_config"]] if self.objects["kai_config"] else []}[kind]
        return [copy.deepcopy(o) for o in found if _matches(o, label_selector)]

    def log(self, namespace, pod, container, previous=False, tail_lines=None):
        self.logs.append((pod, container, previous, tail_lines))
        if "log" in self.fail:
            raise ReadError("logs of gpu-fractioning/%s (%s): Bad Request" % (pod, container))
        return self.objects.get("logs", {}).get((pod, container, previous), self.objects["mpsd_log"])

    def exec_(self, namespace, pod, container, command):
        self.execs.append((pod, command))
        if "exec" in self.fail:
            raise ReadError("exec: no such container")
        return self.objects["mps_control_log"]


def run(lab, **settings):
    return verify(lab, dict(SETTINGS, **settings), sleep=lab.sleep, clock=lab.clock)


def run_kai(lab, **settings):
    return verify(lab, dict(KAI, **settings), sleep=lab.sleep, clock=lab.clock)


def by_name(result):
    return {c["name"]: c for c in result["checks"]}


def pod_named(lab, part):
    return [p for p in lab.objects["pods"] if part in p["metadata"]["name"]][0]


def test_the_converged_release_passes_every_check_in_one_read_each():
    lab = Lab()
    result = run(lab)
    assert result["ok"] and result["failed_check"] is None, result["message"]
    assert [c["name"] for c in result["checks"]] == list(release_verify.CHECKS["gpu-fractioning"])
    # One read per wait, the pods once, the config twice (exists, then Ready); no sleep.
    assert lab.reads == ["Deployment", "GpuFractioningConfig", "DaemonSet", "DaemonSet", "Pod",
                         "GpuFractioningConfig", "Node", "Config"] and lab.now == 0
    mpsd = pod_named(lab, "mpsd")["metadata"]["name"]
    assert lab.execs == [(mpsd, ["cat", "/var/log/nvidia-mps/control.log"])]
    assert lab.calls == [
        ("apps/v1", "Deployment", "gpu-fractioning", None, None), (API, "GpuFractioningConfig", None, "default", None),
        ("apps/v1", "DaemonSet", "gpu-fractioning", None, None), ("apps/v1", "DaemonSet", "gpu-fractioning", None, None),
        ("v1", "Pod", "gpu-fractioning", None, None), (API, "GpuFractioningConfig", None, "default", None),
        ("v1", "Node", None, None, "nvidia.com/gpu.present=true"), ("kai.scheduler/v1", "Config", None, "kai-config", None)]
    assert "4 containers run %s/<name>:%s at the digests in /var/tmp/smshare/fork_images_manifest.json" % (
        BASE, SETTINGS["tag"]) in result["message"]
    assert "kai-config reports DependenciesFulfilled=True" in result["message"]


def test_the_report_shows_each_table_the_role_printed():
    lines = run(Lab())["report"]
    assert lines[0].split() == ["NAME", "COMPONENT", "DESIRED", "READY"]
    assert any(line.startswith("GpuFractioningConfig default: ") and "Ready=True" in line for line in lines)
    assert any(line.split()[:2] == ["NODE", "STATUS"] for line in lines)
    assert any(line.split()[:3] == ["POD", "CONTAINER", "SERVICE"] for line in lines)


def test_a_missing_crd_is_named_and_nothing_else_is_read():
    lab = Lab()
    lab.api = None
    result = run(lab)
    assert result["failed_check"] == "config_api" and lab.reads == ["Deployment"]
    assert result["message"].startswith("No API of the cluster serves kind GpuFractioningConfig")


def test_a_config_being_deleted_is_waited_out_and_the_new_one_checked():
    lab = Lab()
    old = copy.deepcopy(lab.objects["config"])
    old["metadata"]["deletionTimestamp"] = "2026-12-07T07:00:00Z"
    lab.states["GpuFractioningConfig"] = [[old], [old], [lab.objects["config"]]]
    result = run(lab)
    assert result["ok"], result["message"]
    assert lab.reads[1:4] == ["GpuFractioningConfig"] * 3 and lab.now == 10


def test_daemonsets_that_never_come_are_named_with_the_operator_after_the_timeout():
    lab = Lab(daemonsets=[])
    result = run(lab)
    assert result["failed_check"] == "daemonsets_created"
    assert result["message"].startswith("After 30 s namespace gpu-fractioning has no DaemonSet for mpsd, fractiond")
    assert "(kubectl -n gpu-fractioning logs deploy/gpu-fractioning)" in result["message"]
    assert lab.now == 30 and lab.reads.count("DaemonSet") == 7     # 0, 5, ... 30 s


def test_daemonsets_that_settle_pass():
    lab = Lab()
    settling = copy.deepcopy(lab.objects["daemonsets"])
    for ds in settling:
        ds["status"]["numberReady"] = 0
    lab.states["DaemonSet"] = [[], settling, settling, lab.objects["daemonsets"]]
    result = run(lab)
    assert result["ok"], result["message"]
    assert lab.now == 10        # created on the second read, ready on the fourth


def crashing_mpsd(lab):
    """mpsd's container waits to restart after running out of memory (its log says so)."""
    pod = pod_named(lab, "mpsd")
    status = pod["status"]["containerStatuses"][0]
    status.update(ready=False, restartCount=3, state={"waiting": {"reason": "CrashLoopBackOff"}})
    for condition in pod["status"]["conditions"]:
        if condition["type"] in ("Ready", "ContainersReady"):
            condition["status"] = "False"
    for ds in lab.objects["daemonsets"]:
        if "mpsd" in ds["metadata"]["name"]:
            ds["status"]["numberReady"] = 0
    name = pod["metadata"]["name"]
    lab.objects["logs"] = {(name, "mpsd", True): ["starting MPS daemon", "cuInit: CUDA_ERROR_OUT_OF_MEMORY"],
                           (name, "mpsd", False): []}
    return name


def test_a_crashing_mpsd_is_named_with_its_log_and_the_knob():
    lab = Lab()
    name = crashing_mpsd(lab)
    result = run(lab)
    assert result["failed_check"] == "daemonsets_ready"
    assert "DaemonSet gpu-fractioning-mpsd: 0/1 ready" in result["message"]
    assert "mpsd pod %s on smshare-lab-node-01 exits with CUDA_ERROR_OUT_OF_MEMORY" % name in result["message"]
    assert "gpu_fractioning_mpsd_memory_limit" in result["message"]
    # Both runs' logs, the last 50 lines each, and the GPU nodes for their GPU count.
    assert lab.logs == [(name, "mpsd", True, 50), (name, "mpsd", False, 50)]
    assert lab.reads.count("Node") == 1


def test_a_config_that_is_not_ready_is_named_with_its_conditions():
    lab = Lab()
    for condition in lab.objects["config"]["status"]["conditions"]:
        if condition["type"] == "Ready":
            condition.update(status="False", reason="GPUOperatorVersionUnsupported",
                             message="GPU Operator v26.7.0 is below the minimum v26.7.1")
    result = run(lab)
    assert result["failed_check"] == "config_ready"
    assert result["message"].startswith("GpuFractioningConfig default is not Ready after 30 s: ")
    assert "gpu_fractioning_gpu_operator_minimum_version" in result["message"]
    assert "GPUOperatorVersionUnsupported" in by_name(result)["config_ready"]["summary"]


def test_a_node_without_the_condition_is_named():
    lab = Lab()
    for node in lab.objects["nodes"]:
        node["status"]["conditions"] = [c for c in node["status"]["conditions"]
                                        if c["type"] != "gpu-fractioning.nvidia.com/Ready"]
    result = run(lab)
    assert result["failed_check"] == "nodes_ready"
    assert result["message"].startswith("Not ready for fractions after 30 s: smshare-lab-node-01")


def test_an_mpsd_without_multiuser_mode_is_named():
    lab = Lab()
    lab.objects["mpsd_log"] = [line.replace('"-m",', "").replace("[multiuser enabled]", "")
                               for line in lab.objects["mpsd_log"]]
    lab.objects["mps_control_log"] = lab.objects["mps_control_log"].replace("[multiuser enabled]", "")
    result = run(lab)
    assert result["failed_check"] == "mpsd_startup"
    assert "never logged multi-user mode: mpsd started MPS without -m" in result["message"]
    assert result["message"].endswith("then restart mpsd (kubectl -n gpu-fractioning delete pod POD).")


def test_an_mpsd_pod_whose_log_cannot_be_read_is_named():
    lab = Lab()
    lab.fail.add("log")
    result = run(lab)
    name = pod_named(lab, "mpsd")["metadata"]["name"]
    assert result["failed_check"] == "mpsd_startup"
    assert result["message"].startswith("mpsd pod %s on smshare-lab-node-01: its log could not be read (logs of "
                                        "gpu-fractioning/%s (mpsd): Bad Request)." % (name, name))
    # The checks before it and their report are kept.
    assert [c["ok"] for c in result["checks"]][:-1] == [True] * 6 and result["report"]


def test_an_unreadable_control_log_leaves_the_pod_log_to_decide():
    lab = Lab()
    lab.fail.add("exec")
    assert run(lab)["ok"]


def test_an_image_pushed_again_is_named_with_both_digests():
    manifest = copy.deepcopy(CONVERGED["manifest"])
    for image in manifest["images"]:
        if image["service"] == "mpsd":
            image["digest"] = "sha256:" + "0" * 64
    lab = Lab()
    result = run(lab, manifest=manifest)
    assert result["failed_check"] == "images"
    assert "but the images play recorded sha256:" + "0" * 64 in result["message"]
    assert result["message"].endswith("re-run the images play, then this role.")


def test_kai_config_is_checked_only_when_asked():
    lab = Lab()
    for condition in lab.objects["kai_config"]["status"]["conditions"]:
        if condition["type"] == "DependenciesFulfilled":
            condition["status"] = "False"
    assert run(lab)["failed_check"] == "kai_config"
    lab = Lab()
    result = run(lab, check_kai_config=False)
    assert result["ok"] and "Config" not in lab.reads and "kai_config" not in by_name(result)


def test_a_read_that_fails_until_the_timeout_is_named_as_the_cluster_not_answering():
    lab = Lab()
    lab.fail.add("DaemonSet")
    result = run(lab)
    assert result["failed_check"] == "daemonsets_created"
    assert result["message"].startswith("The last read of the cluster failed: reading DaemonSet: connection refused.")


def test_a_read_that_fails_once_is_retried():
    lab = Lab()
    calls = []

    def flaky(*args, **kwargs):
        calls.append(args[1])
        if calls.count("DaemonSet") == 1 and args[1] == "DaemonSet":
            raise ReadError("reading DaemonSet: connection reset")
        return Lab.list(lab, *args, **kwargs)
    lab.list = flaky
    result = run(lab)
    assert result["ok"] and lab.now == 5


def test_deployments_that_are_not_available_are_named_with_their_pulls():
    lab = Lab()
    for deployment in lab.objects["deployments"]:
        deployment["status"]["availableReplicas"] = 0
        for condition in deployment["status"]["conditions"]:
            if condition["type"] == "Available":
                condition.update(status="False", reason="MinimumReplicasUnavailable")
    result = run(lab)
    assert result["failed_check"] == "deployments"
    assert result["message"].startswith("Not Available after 30 s: gpu-fractioning: Available=False")
    # The wait's seven reads, then the pods and events that name failing pulls; nothing after.
    assert lab.reads == ["Deployment"] * 7 + ["Pod", "Event"]


def test_events_that_cannot_be_read_leave_the_pods_to_name_the_pulls():
    lab = Lab()
    lab.fail.add("Event")
    deployment = lab.objects["deployments"][0]
    deployment["status"]["availableReplicas"] = 0
    for condition in deployment["status"]["conditions"]:
        if condition["type"] == "Available":
            condition.update(status="False", reason="MinimumReplicasUnavailable")
    operator = [p for p in lab.objects["pods"] if not p["metadata"]["name"].startswith(("gpu-fractioning-mpsd",
                                                                                        "gpu-fractioning-fractiond"))][0]
    operator["status"]["containerStatuses"][0].update(ready=False, state={"waiting": {
        "reason": "ImagePullBackOff", "message": "Back-off pulling image \"x\""}})
    result = run(lab)
    assert result["failed_check"] == "deployments"
    assert "ImagePullBackOff" in result["message"], result["message"]


# ---------------------------------------------------------------- kai-scheduler
def test_the_converged_kai_release_passes_in_three_reads():
    lab = Lab()
    result = run_kai(lab)
    assert result["ok"], result["message"]
    assert [c["name"] for c in result["checks"]] == list(release_verify.CHECKS["kai-scheduler"])
    assert lab.calls == [("kai.scheduler/v1", "Config", None, "kai-config", None),
                         ("apps/v1", "Deployment", "kai-scheduler", None, None),
                         ("v1", "Pod", "kai-scheduler", None, None)] and lab.now == 0
    assert "containers run %s/kai-scheduler/<service>:%s at the digests in" % (REGISTRY, KAI["tag"]) in result["message"]
    assert "kai-config: gpuSharingMode NvFractions, DependenciesFulfilled=True" in result["message"]
    assert any(line.split()[:3] == ["POD", "CONTAINER", "SERVICE"] for line in result["report"])


def test_a_kai_config_that_never_reports_deployed_ends_the_pass():
    lab = Lab(kai_config=None)
    result = run_kai(lab)
    assert result["failed_check"] == "kai_config_deployed" and set(lab.reads) == {"Config"}


def test_a_kai_pod_that_is_not_running_is_named():
    lab = Lab()
    pod = lab.objects["kai_pods"][0]
    pod["status"]["phase"] = "Pending"
    result = run_kai(lab)
    assert result["failed_check"] == "pods"
    assert result["message"].startswith("Pods not Running: %s (do not continue with a pod that is not running)."
                                        % pod["metadata"]["name"])
    assert result["message"].endswith("re-run the images play, then this role.")


def test_a_kai_config_without_the_sharing_mode_is_named():
    lab = Lab()
    lab.objects["kai_config"]["spec"]["global"]["gpuSharingMode"] = "MPS"
    result = run_kai(lab)
    assert result["failed_check"] == "kai_config_sharing"
    assert "kai-config reports gpuSharingMode MPS, not NvFractions" in result["message"]
