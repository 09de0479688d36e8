# Apache-2.0
"""The cluster roles' filters, on objects shaped as the API server returns them."""
import base64
import json

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.smshare.kai.plugins.filter import api_objects
from ansible_collections.smshare.kai.plugins.filter import images
from ansible_collections.smshare.kai.plugins.filter import object_status
from ansible_collections.smshare.kai.plugins.filter import report_text

REGISTRY = "harbor.corp.internal:8443/team/kai-fork"
BASE = REGISTRY + "/kai-scheduler"
TAG = "smshare-44d1d0a-af0544e"
BINDER_DIGEST = "sha256:" + "1" * 64
OTHER_DIGEST = "sha256:" + "2" * 64
MANIFEST = {"registry": REGISTRY, "tag": TAG, "images": [
    {"fork": "kai_scheduler", "service": "binder", "digest": BINDER_DIGEST},
    {"fork": "gpu_fractioning", "service": "binder", "digest": OTHER_DIGEST},
]}


def pod(name, image, image_id=None, phase="Running", node="gpu-01", container="main", owner=None, ready=True):
    status = {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if image_id is not None:
        status["containerStatuses"] = [{"name": container, "imageID": image_id}]
    meta = {"name": name}
    if owner:
        meta["ownerReferences"] = [{"uid": owner}]
    return {"metadata": meta, "spec": {"nodeName": node, "containers": [{"name": container, "image": image}]},
            "status": status}


# ---------------------------------------------------------------- dockerconfigjson
def test_dockerconfigjson_names_the_registry_host_only():
    text = images.dockerconfigjson(REGISTRY, "robot", "s3cret")
    auths = json.loads(text)["auths"]
    assert list(auths) == ["harbor.corp.internal:8443"]
    assert auths["harbor.corp.internal:8443"]["username"] == "robot"
    assert base64.b64decode(auths["harbor.corp.internal:8443"]["auth"]) == b"robot:s3cret"


@pytest.mark.parametrize("registry", ["registry.lab.internal:5443", "registry.lab.internal:5443/kai-fork",
                                      "registry.lab.internal:5443/mirror/ghcr.io/kai-scheduler"])
def test_dockerconfigjson_takes_a_host_or_a_registry_path(registry):
    """kai_pilot and smoke_test pass the host alone (the chart's, the test images'); the chart roles their registry path."""
    assert list(json.loads(images.dockerconfigjson(registry, "u", "p"))["auths"]) == ["registry.lab.internal:5443"]


@pytest.mark.parametrize("args", [("", "u", "p"), (REGISTRY, "", "p"), (REGISTRY, "u", None)])
def test_dockerconfigjson_refuses_empty_parts(args):
    with pytest.raises(AnsibleFilterError, match="non-empty"):
        images.dockerconfigjson(*args)


# ---------------------------------------------------------------- pod_images
def test_an_image_of_this_build_at_the_recorded_digest_passes():
    rows = images.pod_images([pod("binder-1", BASE + "/binder:" + TAG, BASE + "/binder@" + BINDER_DIGEST)],
                             BASE, TAG, MANIFEST, "kai_scheduler")
    assert rows == [{"pod": "binder-1", "node": "gpu-01", "container": "main", "image": BASE + "/binder:" + TAG,
                     "service": "binder", "digest": BINDER_DIGEST, "expected_digest": BINDER_DIGEST,
                     "ok": True, "problem": ""}]


def test_a_digest_that_differs_is_named_with_both_digests():
    row = images.pod_images([pod("binder-1", BASE + "/binder:" + TAG, BASE + "/binder@" + OTHER_DIGEST)],
                            BASE, TAG, MANIFEST, "kai_scheduler")[0]
    assert not row["ok"]
    assert OTHER_DIGEST in row["problem"] and BINDER_DIGEST in row["problem"]
    assert "pushed again" in row["problem"]


@pytest.mark.parametrize("image", [
    "ghcr.io/kai-scheduler/kai-scheduler/binder:" + TAG,     # upstream's registry
    BASE + "/binder:0.0.0",                                  # appVersion fallback (empty tag)
    BASE + "/binder",                                        # no tag at all
    REGISTRY + "/other/binder:" + TAG,                        # another path of the registry
    BASE + "/sub/binder:" + TAG,                              # one level too deep
])
def test_a_foreign_image_is_named(image):
    row = images.pod_images([pod("binder-1", image, "x@" + BINDER_DIGEST)], BASE, TAG, MANIFEST, "kai_scheduler")[0]
    assert not row["ok"]
    assert "not an image of this build" in row["problem"] and image in row["problem"]


def test_a_service_the_manifest_does_not_list_is_named():
    row = images.pod_images([pod("x-1", BASE + "/crd-upgrader:" + TAG, BASE + "/crd-upgrader@" + BINDER_DIGEST)],
                            BASE, TAG, MANIFEST, "kai_scheduler")[0]
    assert not row["ok"] and "does not list" in row["problem"]


def test_an_image_loaded_without_a_registry_digest_is_named():
    row = images.pod_images([pod("binder-1", BASE + "/binder:" + TAG, "sha256:" + "3" * 64)],
                            BASE, TAG, MANIFEST, "kai_scheduler")[0]
    assert not row["ok"] and "without a registry digest" in row["problem"]


def test_an_image_id_of_another_repository_is_not_taken_for_ours():
    row = images.pod_images([pod("binder-1", BASE + "/binder:" + TAG, REGISTRY + "/mirror/binder@" + BINDER_DIGEST)],
                            BASE, TAG, MANIFEST, "kai_scheduler")[0]
    assert not row["ok"] and "same image under another name" in row["problem"]


def test_a_docker_pullable_image_id_is_read():
    row = images.pod_images([pod("binder-1", BASE + "/binder:" + TAG,
                                 "docker-pullable://" + BASE + "/binder@" + BINDER_DIGEST)],
                            BASE, TAG, MANIFEST, "kai_scheduler")[0]
    assert row["ok"], row


def test_a_container_not_started_yet_is_named():
    row = images.pod_images([pod("binder-1", BASE + "/binder:" + TAG, None, phase="Pending")],
                            BASE, TAG, MANIFEST, "kai_scheduler")[0]
    assert not row["ok"] and "not pulled its image yet" in row["problem"]


def test_without_a_manifest_only_registry_and_tag_are_checked():
    rows = images.pod_images([pod("binder-1", BASE + "/binder:" + TAG, BASE + "/binder@" + OTHER_DIGEST)],
                             BASE, TAG, None, "kai-scheduler")
    assert rows[0]["ok"]


def test_init_containers_are_checked_too():
    p = pod("binder-1", BASE + "/binder:" + TAG, BASE + "/binder@" + BINDER_DIGEST)
    p["spec"]["initContainers"] = [{"name": "init", "image": "busybox:1"}]
    rows = images.pod_images([p], BASE, TAG, MANIFEST, "kai_scheduler")
    assert [(r["container"], r["ok"]) for r in rows] == [("init", False), ("main", True)]


def test_pod_images_refuses_a_non_list():
    with pytest.raises(AnsibleFilterError):
        images.pod_images({"items": []}, BASE, TAG)


# ---------------------------------------------------------------- workloads
def deployment(name, replicas=1, available=1, updated=1, condition="True", generation=2, observed=2):
    return {"metadata": {"name": name, "generation": generation},
            "spec": {"replicas": replicas},
            "status": {"observedGeneration": observed, "replicas": replicas, "availableReplicas": available,
                       "updatedReplicas": updated,
                       "conditions": [{"type": "Available", "status": condition, "reason": "MinimumReplicasUnavailable",
                                       "message": "Deployment does not have minimum availability."}]}}


def test_deployments_ready_as_rollout_status_means_it():
    rows = object_status.deployments_ready([
        deployment("ok"),
        deployment("unavailable", available=0, condition="False"),
        deployment("rolling", replicas=2, available=2, updated=1),
        deployment("stale", observed=1),
    ])
    assert [r["ok"] for r in rows] == [True, False, False, False]
    assert "Deployment does not have minimum availability" in rows[1]["reason"]
    assert "1 of 2 replicas updated" in rows[2]["reason"]
    assert "not observed" in rows[3]["reason"]


def test_condition_summary():
    obj = {"status": {"conditions": [
        {"type": "DependenciesFulfilled", "status": "False", "reason": "dependencies_missing",
         "message": "\nbinder is missing GpuFractioningConfig not found"},
        {"type": "Ready", "status": "True", "reason": "ready", "message": "System is ready"}]}}
    assert object_status.condition_summary(obj).startswith("DependenciesFulfilled=False (dependencies_missing:")
    assert object_status.condition_summary({}) == "no conditions"


def test_nodes_condition():
    ready = {"type": "gpu-fractioning.nvidia.com/Ready", "status": "True", "reason": "AllDaemonsReady"}
    nodes = [{"metadata": {"name": "gpu-01"}, "status": {"conditions": [ready]}},
             {"metadata": {"name": "gpu-02"}, "status": {"conditions": []}}]
    rows = object_status.nodes_condition(nodes, "gpu-fractioning.nvidia.com/Ready")
    assert [(r["node"], r["status"], r["ok"]) for r in rows] == [("gpu-01", "True", True), ("gpu-02", "missing", False)]


def test_api_version_of_prefers_the_preferred_version():
    apis = {"v1": {"Pod": {"preferred": True}},
            "gpu-fractioning.kai.scheduler/v1alpha1": {"GpuFractioningConfig": {"preferred": False}},
            "gpu-fractioning.kai.scheduler/v1beta1": {"GpuFractioningConfig": {"preferred": True}}}
    assert api_objects.api_version_of(apis, "GpuFractioningConfig") == "gpu-fractioning.kai.scheduler/v1beta1"
    assert api_objects.api_version_of(apis, "Nothing") is None


# ---------------------------------------------------------------- custom resources
def crd(name, group, kind, versions, scope="Cluster"):
    spec = {"group": group, "names": {"kind": kind}, "scope": scope, "versions": versions}
    return {"metadata": {"name": name}, "spec": spec}


def test_crds_matching_and_their_objects():
    crds = [crd("queues.scheduling.run.ai", "scheduling.run.ai", "Queue",
                [{"name": "v2", "storage": True}, {"name": "v1", "storage": False}]),
            crd("gadgets.example.com", "example.com", "Gadget", [{"name": "v1", "storage": True}]),
            crd("podgroups.scheduling.run.ai", "scheduling.run.ai", "PodGroup", [{"name": "v2alpha2", "storage": True}],
                "Namespaced")]
    found = api_objects.crds_matching(crds, r"kai\.scheduler|scheduling\.run\.ai")
    assert [(c["name"], c["version"], c["namespaced"]) for c in found] == [
        ("queues.scheduling.run.ai", "v2", False), ("podgroups.scheduling.run.ai", "v2alpha2", True)]
    queues = [{"metadata": {"name": "default-queue"}}, {"metadata": {"name": "team-a"}}]
    results = [{"item": found[0], "resources": queues},
               {"item": found[1], "resources": [{"metadata": {"name": "pg-1", "namespace": "ml"}}]}]
    objects = api_objects.custom_objects(results)
    assert objects[0] == {"api_version": "scheduling.run.ai/v2", "kind": "Queue", "name": "default-queue",
                          "namespace": ""}
    assert api_objects.foreign_objects(objects, {"Queue": ["default-queue"]}) == ["Queue team-a", "PodGroup ml/pg-1"]


# ---------------------------------------------------------------- preflight_cluster_rows's GPU stack (no filters)
@pytest.mark.parametrize("image, version", [
    ("nvcr.io/nvidia/gpu-operator:v26.7.1", "26.7.1"),
    ("nvcr.io/nvidia/k8s/container-toolkit:v1.20.1-ubuntu24.04", "1.20.1"),
    ("nvcr.io/nvidia/k8s-device-plugin:v0.20.1", "0.20.1"),
    ("registry:5000/nvidia/k8s-device-plugin", None),
    ("nvcr.io/nvidia/k8s-device-plugin:latest", None),
])
def test_image_version(image, version):
    assert images.image_version(image) == version


def test_component_images_finds_workloads_by_image_name():
    workloads = [
        {"kind": "Deployment", "metadata": {"name": "gpu-operator", "namespace": "gpu-operator"},
         "spec": {"template": {"spec": {"containers": [{"image": "nvcr.io/nvidia/gpu-operator:v26.7.1"}]}}},
         "status": {"availableReplicas": 1}},
        {"kind": "DaemonSet", "metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "gpu-operator"},
         "spec": {"template": {"spec": {"initContainers": [{"image": "nvcr.io/nvidia/cuda:13.0-base"}],
                                        "containers": [{"image": "nvcr.io/nvidia/k8s-device-plugin:v0.19.0"}]}}},
         "status": {"desiredNumberScheduled": 2, "numberReady": 2}},
    ]
    found = images.component_images(workloads, ["gpu-operator", "k8s-device-plugin", "container-toolkit"])
    assert found["gpu-operator"][0]["version"] == "26.7.1" and found["gpu-operator"][0]["ready"]
    assert found["k8s-device-plugin"][0]["version"] == "0.19.0"
    assert found["container-toolkit"] == []


# ---------------------------------------------------------------- preflight_runtime_rows's words (no filter)
@pytest.mark.parametrize("stat, words", [
    ({"exists": False}, "missing"),
    ({"exists": True, "issock": True}, "socket"),
    ({"exists": True, "islnk": True, "lnk_source": "/a.sock"}, "link to /a.sock"),
    ({"exists": True, "isreg": True}, "regular file"),
])
def test_stat_kind(stat, words):
    assert report_text.stat_kind(stat) == words


# ---------------------------------------------------------------- values and reports
def test_value_paths():
    values = {"global": {"tag": "x", "nvFractions": {"set": False}}, "binder": {}}
    assert report_text.value_paths(values) == ["global", "global.tag", "global.nvFractions", "global.nvFractions.set",
                                               "binder"]
    assert report_text.value_paths("not a mapping") == []


def test_text_table_aligns_columns():
    lines = report_text.text_table([{"a": "x", "b": 1}, {"a": "longer", "b": None}], ["a", "b"])
    assert lines == ["A       B", "x       1", "longer"]


def test_object_refs_are_minimal_manifests():
    objects = [{"api_version": "scheduling.run.ai/v2", "kind": "Queue", "name": "q", "namespace": ""},
               {"api_version": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "name": "pg", "namespace": "ml"}]
    assert api_objects.object_refs(objects) == [
        {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "q"}},
        {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": "pg", "namespace": "ml"}}]


# ---------------------------------------------------------------- which forks the images role can skip
def lookup(fork, **result):
    return dict({"_fork_images_fork": {"id": fork, "images": ["a", "b"]}}, **result)


@pytest.mark.parametrize("results, present", [
    ([lookup("kai_scheduler", all_present=True), lookup("gpu_fractioning", all_present=False)], ["kai_scheduler"]),
    ([lookup("kai_scheduler", images=[{}, {}]), lookup("gpu_fractioning", images=[{}])], ["kai_scheduler"]),
    ([lookup("kai_scheduler", skipped=True)], []),       # the other lookup ran (push or not)
    ([], []),
])
def test_the_forks_whose_images_are_all_there(results, present):
    assert images.forks_present({"results": results}) == present
