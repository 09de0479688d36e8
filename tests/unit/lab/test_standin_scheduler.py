"""The stand-in KAI scheduler's decisions against a fake API: shares packed on
GPUs, the gang rule (and its knob), queue leaves and limits, the events it writes."""
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "lab" / "standin" / "controllers"))

from standin import scheduler  # noqa: E402
from standin.kube import KNOBS_PATH  # noqa: E402


def node(name="node-1", gpus=8):
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.memory": "81920"}}, "spec": {},
            "status": {"allocatable": {"cpu": "8", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": str(gpus)},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def queue(name, parent=None, gpu_limit=-1):
    spec = {"resources": {"gpu": {"quota": 0, "limit": gpu_limit}, "cpu": {"quota": 0, "limit": -1},
                          "memory": {"quota": 0, "limit": -1}}}
    if parent:
        spec["parentQueue"] = parent
    return {"metadata": {"name": name}, "spec": spec}


def pod(name, queue_name="team", annotations=None, gpus=0, job=None):
    meta = {"name": name, "namespace": "ns", "uid": "uid-" + name, "creationTimestamp": "2026-01-01T00:00:0%dZ" % len(name),
            "labels": {"kai.scheduler/queue": queue_name}, "annotations": annotations or {}}
    if job:
        meta["ownerReferences"] = [{"kind": "Job", "name": job["metadata"]["name"], "uid": job["metadata"]["uid"],
                                    "controller": True}]
    resources = {"limits": {"nvidia.com/gpu": gpus}} if gpus else {}
    return {"metadata": meta, "spec": {"schedulerName": "kai-scheduler", "containers": [
        {"name": "c", "resources": dict(resources, requests={"cpu": "100m", "memory": "64Mi"})}]},
        "status": {"phase": "Pending"}}


def job(name, min_member):
    return {"metadata": {"name": name, "namespace": "ns", "uid": "job-" + name,
                         "annotations": {"kai.scheduler/batch-min-member": str(min_member)}}}


class FakeKube:
    def __init__(self, pods, nodes, queues, jobs=(), knobs=None):
        self.pods = {p["metadata"]["name"]: p for p in pods}
        self.nodes, self.queues = nodes, queues
        self.jobs = {j["metadata"]["name"]: j for j in jobs}
        self.knobs = knobs or {}
        self.events, self.binds, self.conditions = [], [], {}

    def request(self, method, path, body=None, content_type=None, query=None):
        selector = (query or {}).get("fieldSelector", "")
        if path == "/api/v1/pods" and "spec.nodeName=," in selector:
            return {"items": [p for p in self.pods.values() if not p["spec"].get("nodeName")]}
        if path == "/api/v1/pods":
            return {"items": [p for p in self.pods.values() if p["spec"].get("nodeName")]}
        if path == scheduler.QUEUES:
            return {"items": self.queues}
        raise AssertionError(path)

    def get(self, path):
        if path == KNOBS_PATH:
            return {"data": self.knobs}
        return self.jobs.get(path.rsplit("/", 1)[1])

    def list(self, path, selector=None):
        assert path == "/api/v1/nodes"
        return self.nodes

    def create(self, path, obj):
        if path.endswith("/binding"):
            name = obj["metadata"]["name"]
            self.binds.append((name, obj["target"]["name"]))
            self.pods[name]["spec"]["nodeName"] = obj["target"]["name"]
        else:
            self.events.append((obj["involvedObject"]["name"], obj["reason"], obj["message"], obj["source"]))
        return obj

    def merge_patch(self, path, patch):
        self.pods[path.rsplit("/", 1)[1]]["metadata"]["annotations"].update(patch["metadata"]["annotations"])

    def strategic_patch(self, path, patch):
        self.conditions[path.split("/")[-2]] = patch["status"]["conditions"][0]


def run(kube):
    scheduler.Scheduler(kube).once()
    return kube


def test_quantities_and_requests():
    assert scheduler.quantity("100m") == 0.1 and scheduler.quantity("1Gi") == 2 ** 30
    assert scheduler.quantity("1e3") == 1000 and scheduler.quantity("bogus") == 0.0
    p = pod("p", gpus=1)
    p["spec"]["initContainers"] = [{"resources": {"requests": {"cpu": "2", "nvidia.com/gpu": "2"}}}]
    assert scheduler.requests(p) == {"cpu": 2000.0, "memory": 64 * 2 ** 20, "gpu": 2.0, "pods": 1}


def test_half_gpu_pods_share_one_gpu_and_events_name_kai():
    kube = run(FakeKube([pod("a", annotations={"gpu-fraction": "0.5"}), pod("b", annotations={"gpu-fraction": "0.5"}),
                         pod("c", annotations={"gpu-memory": "40960"})], [node()], [queue("team")]))
    assert sorted(kube.binds) == [("a", "node-1"), ("b", "node-1"), ("c", "node-1")]
    indices = {n: kube.pods[n]["metadata"]["annotations"][scheduler.INDEX_ANNOTATION] for n in "abc"}
    assert indices["a"] == indices["b"] != indices["c"]
    scheduled = [e for e in kube.events if e[1] == "Scheduled"]
    assert scheduled[0][2] == "Successfully assigned pod ns/a to node node-1 at node-pool default"
    assert scheduled[0][3] == {"component": "kai-scheduler"}


def test_gang_larger_than_the_gpus_places_nothing():
    gang = job("gang", 3)
    pods = [pod("gang-%d" % i, gpus=1, job=gang) for i in range(3)]
    kube = run(FakeKube(pods, [node(gpus=2)], [queue("team")], [gang]))
    assert kube.binds == []
    assert kube.conditions["gang-0"]["reason"] == "Unschedulable"
    assert kube.conditions["gang-0"]["message"].startswith(
        "Unable to schedule the pod group of Job gang: 3 pods must start together "
        "(kai.scheduler/batch-min-member), 2 fit now; Unable to schedule pod: node-1: not enough nvidia.com/gpu")


def test_gang_waits_for_its_pods_to_exist():
    gang = job("gang", 3)
    kube = run(FakeKube([pod("gang-0", gpus=1, job=gang)], [node()], [queue("team")], [gang]))
    assert kube.binds == []
    assert kube.conditions["gang-0"]["message"] == ("Job is not ready for scheduling. Waiting for 3 pods, currently "
                                                    "1 exist, 0 are gated")


def test_the_broken_gang_knob_starts_the_gang_partially():
    gang = job("gang", 3)
    pods = [pod("gang-%d" % i, gpus=1, job=gang) for i in range(3)]
    kube = run(FakeKube(pods, [node(gpus=2)], [queue("team")], [gang], knobs={"kai-scheduler.gang": "false"}))
    assert len(kube.binds) == 2


def test_queues_must_be_existing_leaves_within_their_limits():
    queues = [queue("parent"), queue("team", "parent", gpu_limit=1), queue("other", "parent")]
    kube = run(FakeKube([pod("to-parent", "parent", gpus=1), pod("nowhere", "missing", gpus=1),
                         pod("first", "team", gpus=1), pod("second", "team", gpus=1)], [node()], queues))
    assert kube.binds == [("first", "node-1")]
    assert kube.conditions["to-parent"]["message"] == ("Queue parent is not a leaf queue (children: other, team); "
                                                       "only leaf queues can run jobs")
    assert kube.conditions["nowhere"]["message"] == "Queue missing does not exist"
    assert kube.conditions["second"]["message"] == ("team quota has reached the allowable limit of GPUs. Limit is 1 "
                                                    "GPUs, currently 1 GPUs allocated and workload requested 1 GPUs")


def test_paused_decides_nothing():
    kube = run(FakeKube([pod("a", gpus=1)], [node()], [queue("team")], knobs={"kai-scheduler.paused": "true"}))
    assert kube.binds == [] and kube.events == []


# ---------------------------------------------------------------- the binder's reservation pods
CONFIG = {"spec": {"global": {"gpuSharingMode": "NvFractions"}, "binder": {"resourceReservation": {
    "namespace": "kai-resource-reservation", "serviceAccountName": "kai-resource-reservation",
    "appLabel": "kai-resource-reservation", "runtimeClassName": "nvidia",
    "image": {"repository": "reg/kai-scheduler", "name": "resourcereservation", "tag": "t1"}}}}}


class BinderKube(FakeKube):
    """FakeKube plus kai-config and reservation pods that find their GPU at once
    (answer=False: they never do)."""

    def __init__(self, *args, answer=True, **kwargs):
        super().__init__(*args, **kwargs)
        self.answer = answer
        self.reservations, self.deleted = {}, []

    def request(self, method, path, body=None, content_type=None, query=None):
        if "labelSelector" in (query or {}):
            return {"items": list(self.reservations.values())}
        return super().request(method, path, body, content_type, query)

    def get(self, path):
        if path == scheduler.KAI_CONFIG:
            return CONFIG
        if "/kai-resource-reservation/pods/" in path:
            found = self.reservations.get(path.rsplit("/", 1)[1])
            if found is not None and self.answer:
                index = found["metadata"]["annotations"][scheduler.INDEX_ANNOTATION]
                found["metadata"]["annotations"][scheduler.RESERVED_GPU] = "GPU-%08d" % int(index)
            return found
        return super().get(path)

    def create(self, path, obj):
        if path == "/api/v1/namespaces/kai-resource-reservation/pods":
            self.reservations[obj["metadata"]["name"]] = obj
            return obj
        return super().create(path, obj)

    def delete(self, path):
        self.deleted.append(path.rsplit("/", 1)[1])
        self.reservations.pop(path.rsplit("/", 1)[1], None)

    def merge_patch(self, path, patch):
        super().merge_patch(path, patch)
        self.pods[path.rsplit("/", 1)[1]]["metadata"].setdefault("labels", {}).update(patch["metadata"].get("labels")
                                                                                      or {})


def half(name):
    return pod(name, annotations={"gpu-fraction": "0.5"})


def test_binder_reserves_one_gpu_and_writes_the_annotations():
    kube = run(BinderKube([half("a"), half("b")], [node()], [queue("team")]))
    assert sorted(kube.binds) == [("a", "node-1"), ("b", "node-1")]
    assert len(kube.reservations) == 1
    res = next(iter(kube.reservations.values()))
    assert res["metadata"]["name"].startswith("gpu-reservation-") and len(res["metadata"]["name"]) == 32
    assert res["spec"]["runtimeClassName"] == "nvidia" and res["spec"]["nodeName"] == "node-1"
    assert res["spec"]["containers"][0]["image"] == "reg/kai-scheduler/resourcereservation:t1"
    assert res["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert res["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
    for name in "ab":
        notes = kube.pods[name]["metadata"]["annotations"]
        assert notes["nvidia.com/container.c.gpu-compute.portion"] == "0.5"
        # KAI's NvFractions plugin: (the node label - reservedGpuMemory 1Gi) x portion; no limit unless asked
        assert notes["nvidia.com/container.c.gpu-memory.request"] == "40448Mi"
        assert "nvidia.com/container.c.gpu-memory.limit" not in notes
        assert notes["nvidia.com/container.c.gpus.devices"] == "GPU-00000000"
        assert notes["received-resource-type"] == "Fraction"
        assert kube.pods[name]["metadata"]["labels"][scheduler.GPU_GROUP] == res["metadata"]["labels"][scheduler.GPU_GROUP]


def test_binder_without_the_gpu_memory_label_reports_a_binding_error_and_binds_nothing():
    bare = node()
    del bare["metadata"]["labels"]["nvidia.com/gpu.memory"]
    kube = run(BinderKube([half("a")], [bare], [queue("team")]))
    assert kube.binds == []
    errors = [e for e in kube.events if e[1] == "BindingError"]
    assert errors and errors[0][2] == (
        "Failed to bind pod ns/a to node node-1: plugin nvfractions failed in PreBind: failed to set NvFractions "
        "memory annotation: node does not include nvidia.com/gpu.memory label")


def test_binder_reserved_memory_knob_and_a_limit_asked_for():
    asked = pod("a", annotations={"gpu-fraction": "0.5", "kai.scheduler/container.c.gpu-memory.portion.limit": "0.75"})
    kube = run(BinderKube([asked], [node()], [queue("team")], knobs={"kai-binder.reserved-gpu-memory-mib": "0"}))
    notes = kube.pods["a"]["metadata"]["annotations"]
    assert notes["nvidia.com/container.c.gpu-memory.request"] == "40960Mi"
    assert notes["nvidia.com/container.c.gpu-memory.limit"] == "61440Mi"


def test_binder_split_knob_puts_each_pod_on_its_own_gpu():
    kube = run(BinderKube([half("a"), half("b")], [node()], [queue("team")],
                          knobs={"kai-binder.split-gpus": "true"}))
    devices = {kube.pods[n]["metadata"]["annotations"]["nvidia.com/container.c.gpus.devices"] for n in "ab"}
    assert len(devices) == 2 and len(kube.reservations) == 2


def test_binder_timeout_deletes_the_reservation_and_leaves_the_pod_pending():
    kube = run(BinderKube([half("a")], [node()], [queue("team")], answer=False,
                          knobs={"kai-binder.allocation-timeout": "0.2"}))
    assert kube.binds == []
    assert kube.conditions["a"]["message"].startswith(
        "failed waiting for GPU reservation pod to allocate: kai-resource-reservation/gpu-reservation-")
    assert kube.reservations == {} and len(kube.deleted) == 1


def test_binder_releases_reservations_nobody_holds():
    kube = BinderKube([], [node()], [queue("team")])
    kube.reservations["gpu-reservation-x"] = {"metadata": {"name": "gpu-reservation-x",
                                                           "namespace": "kai-resource-reservation",
                                                           "labels": {scheduler.GPU_GROUP: "node-1-gpu0"}}}
    run(kube)
    assert kube.deleted == ["gpu-reservation-x"]
