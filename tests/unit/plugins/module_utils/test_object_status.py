# Apache-2.0
"""module_utils/object_status.py's rules that no filter exposes (the release checks
use them: module_utils/readiness.py, release_verify.py); the filters' own:
tests/unit/plugins/filter/test_cluster_filters.py."""
from ansible_collections.smshare.kai.plugins.module_utils import object_status


def pod(name, node="gpu-01", owner=None, ready=True):
    meta = {"name": name}
    if owner:
        meta["ownerReferences"] = [{"uid": owner}]
    return {"metadata": meta, "spec": {"nodeName": node, "containers": [{"name": "main", "image": "img"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def daemonset(name, component, desired, ready, uid):
    return {"metadata": {"name": name, "uid": uid},
            "spec": {"template": {"metadata": {"labels": {"app.kubernetes.io/component": component}}}},
            "status": {"desiredNumberScheduled": desired, "numberReady": ready}}


def test_daemonsets_ready_names_the_nodes_that_are_not():
    bad = pod("mpsd-x", node="gpu-02", owner="u-mpsd", ready=False)
    bad["status"]["containerStatuses"] = [{"name": "main", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]
    rows = object_status.daemonsets_ready(
        [daemonset("gpu-fractioning-mpsd", "mpsd", 2, 1, "u-mpsd"),
         daemonset("gpu-fractioning-fractiond", "fractiond", 2, 2, "u-frac"),
         daemonset("nothing", "other", 0, 0, "u-none")],
        [pod("mpsd-a", node="gpu-01", owner="u-mpsd"), bad,
         pod("frac-a", owner="u-frac"), pod("frac-b", owner="u-frac")])
    mpsd, frac, nothing = rows
    assert (mpsd["component"], mpsd["ok"]) == ("mpsd", False)
    assert mpsd["not_ready"] == [{"pod": "mpsd-x", "node": "gpu-02", "reason": "main CrashLoopBackOff"}]
    assert frac["ok"] and frac["missing"] == 0
    assert not nothing["ok"]    # desired 0: no node matches


def test_owned_pods():
    pods = [pod("a", owner="u1"), pod("b", owner="u2"), pod("c")]
    assert [p["metadata"]["name"] for p in object_status.owned_pods(pods, "u1")] == ["a"]
    assert object_status.owned_pods(pods, "") == []


def test_conditions():
    obj = {"status": {"conditions": [
        {"type": "DependenciesFulfilled", "status": "False", "reason": "dependencies_missing",
         "message": "\nbinder is missing GpuFractioningConfig not found"},
        {"type": "Ready", "status": "True", "reason": "ready", "message": "System is ready"}]}}
    found = object_status.conditions(obj)
    assert found["Ready"]["status"] == "True"
    assert "GpuFractioningConfig not found" in found["DependenciesFulfilled"]["message"]
