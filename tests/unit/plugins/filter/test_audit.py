# Apache-2.0
"""The drift audit's filters: each kind of drift named once, nothing on a node,
release or tree that matches, and one report shape for every area."""
import json

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.smshare.kai.plugins.filter import audit
from ansible_collections.smshare.kai.plugins.filter import images
from ansible_collections.smshare.kai.plugins.filter import kai_rules

PIN = "nvidia-driver-pinning-615"


def node(**over):
    """nvidia_driver_info's answer on a converged HGX node (gather: packages, driver, nvswitches, services)."""
    info = {
        "installed": {"nvidia-driver-open": "615.71.09-1", PIN: "615.71.09-1",
                      "nvidia-fabricmanager": "615.71.09-2", "libnvidia-nscq": "615.71.09-1"},
        "driver": {"state": "ok", "version": "615.71.09", "branch": 615, "library_version": None,
                   "kernel_module_version": "615.71.09"},
        "nvswitch_count": 6,
        "services": {"nvidia-fabricmanager": {"load": "loaded", "enabled": "enabled", "active": "active"}},
    }
    for key, value in over.items():
        info[key] = value
    return info


def fields(findings):
    return [(f["object"], f["field"], f["wanted"], f["found"]) for f in findings]


# ---------------------------------------------------------------- driver
def test_a_converged_node_has_no_drift():
    assert audit.audit_driver(node(), "gpu-01", 615, pin_package=PIN) == []
    assert audit.audit_driver(node(), "gpu-01", "615", version="615.71.09", pin_package=PIN) == []


def test_each_driver_drift_is_named():
    info = node()
    info["installed"] = dict(info["installed"], **{"nvidia-driver-pinning-580": "580.95.05-1"})
    del info["installed"][PIN]
    info["installed"]["nvidia-fabricmanager"] = "615.65.01-1"
    info["services"]["nvidia-fabricmanager"]["active"] = "failed"
    got = fields(audit.audit_driver(info, "gpu-01", 615, pin_package=PIN))
    assert got == [
        (PIN, "installed", "installed", "(absent)"),
        ("nvidia-driver-pinning-580", "installed", "(absent)", "580.95.05-1"),
        ("nvidia-fabricmanager", "version", "615.71.09", "615.65.01"),
        ("nvidia-fabricmanager.service", "active", "active", "failed"),
    ]
    assert all(f["area"] == "driver" and f["host"] == "gpu-01" for f in audit.audit_driver(info, "gpu-01", 615))


def test_a_loaded_driver_that_is_not_the_installed_one_is_named():
    info = node(driver={"state": "ok", "version": "615.65.01", "branch": 615})
    got = audit.audit_driver(info, "gpu-01", 615)
    assert fields(got) == [("loaded driver", "version", "615.71.09", "615.65.01")]
    assert "reboot" in got[0]["detail"]


def test_the_pinned_version_and_branch_are_compared():
    info = node()
    info["installed"]["nvidia-driver-open"] = "1:580.95.05-0ubuntu1"
    info["driver"] = {"state": "mismatch", "version": None, "branch": None,
                      "library_version": "580.95", "kernel_module_version": "615.71.09"}
    got = fields(audit.audit_driver(info, "gpu-01", 615, version="615.71.09", fabricmanager="never"))
    assert ("nvidia-driver-open", "branch", "615", "580") in got
    assert ("nvidia-driver-open", "version", "615.71.09", "580.95.05") in got
    assert ("loaded driver", "state", "ok", "mismatch") in got
    assert ("nvidia-fabricmanager", "installed", "(absent)", "615.71.09") in got


def test_no_driver_at_all():
    info = node(installed={}, driver={"state": "absent"}, nvswitch_count=0, services={})
    got = fields(audit.audit_driver(info, "gpu-01", 615))
    assert got == [(PIN, "installed", "installed", "(absent)"),
                   ("nvidia-driver-open", "version", "615.x", "(absent)"),
                   ("loaded driver", "state", "ok", "absent")]


def test_fabric_manager_wanted_only_with_nvswitches_on_auto():
    info = node(nvswitch_count=0)
    del info["installed"]["nvidia-fabricmanager"]
    assert audit.audit_driver(info, "n", 615) == []
    assert fields(audit.audit_driver(info, "n", 615, fabricmanager="always")) == [
        ("nvidia-fabricmanager", "version", "615.71.09", "(absent)")]


def test_audit_driver_refuses_other_input():
    with pytest.raises(AnsibleFilterError):
        audit.audit_driver([], "n", 615)


# ---------------------------------------------------------------- release values
WANTED = {"global": {"gpuSharingMode": "NvFractions", "tag": "t1", "imagePullSecrets": [{"name": "s"}],
                     "nvFractions": {"set": False}},
          "binder": {"runtimeClassName": "nvidia"}}
DEPLOYED = {"status": "deployed", "values": WANTED}


def test_release_values_that_match_are_no_drift():
    assert audit.audit_values(json.loads(json.dumps(WANTED)), WANTED, "kai-scheduler", status=DEPLOYED) == []


def test_each_differing_missing_or_extra_value_is_named():
    found = json.loads(json.dumps(WANTED))
    found["global"]["gpuSharingMode"] = "Disabled"
    del found["binder"]
    found["global"]["imagePullSecrets"] = []
    found["global"]["nvFractions"]["set"] = 0
    found["scheduler"] = {"replicas": 2}
    got = fields(audit.audit_values(found, WANTED, "kai-scheduler", status=DEPLOYED))
    assert got == [
        ("kai-scheduler", "values.binder.runtimeClassName", "nvidia", "(absent)"),
        ("kai-scheduler", "values.global.gpuSharingMode", "NvFractions", "Disabled"),
        ("kai-scheduler", "values.global.imagePullSecrets", [{"name": "s"}], []),
        ("kai-scheduler", "values.global.nvFractions.set", False, 0),
        ("kai-scheduler", "values.scheduler.replicas", "(absent)", 2),
    ]


def test_a_release_not_installed_or_failed_is_named():
    assert fields(audit.audit_values({}, WANTED, "r", status={})) == [("r", "status", "deployed", "(absent)")]
    failed = {"status": "failed", "description": "timed out", "values": WANTED}
    got = audit.audit_values(WANTED, WANTED, "r", status=failed)
    assert fields(got) == [("r", "status", "deployed", "failed")]
    assert got[0]["detail"] == "timed out"


# ---------------------------------------------------------------- images
REGISTRY = "harbor.corp.internal:8443/team/kai-fork"
BASE = REGISTRY + "/kai-scheduler"
TAG = "smshare-44d1d0a-af0544e"
D1, D2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64
MANIFEST = {"registry": REGISTRY, "tag": TAG, "images": [{"fork": "kai-scheduler", "service": "binder", "digest": D1}]}


def pod(name, image, image_id):
    return {"metadata": {"name": name}, "spec": {"nodeName": "n1", "containers": [{"name": "main", "image": image}]},
            "status": {"containerStatuses": [{"name": "main", "imageID": image_id}]}}


def test_images_at_the_recorded_digest_are_no_drift_and_others_are_named():
    repo = BASE + "/binder"
    pods = [pod("binder-ok", repo + ":" + TAG, repo + "@" + D1),
            pod("binder-repushed", repo + ":" + TAG, repo + "@" + D2),
            pod("foreign", "docker.io/library/busybox:1", "docker.io/library/busybox@" + D2)]
    rows = images.pod_images(pods, BASE, TAG, MANIFEST, "kai-scheduler")
    got = audit.audit_images(rows, "kai-scheduler", host="ctl", base=BASE, tag=TAG)
    assert fields(got) == [
        ("kai-scheduler/binder-repushed/main", "digest", D1, D2),
        ("kai-scheduler/foreign/main", "image", BASE + "/<service>:" + TAG, "docker.io/library/busybox:1"),
    ]
    assert "pushed again" in got[0]["detail"] and got[0]["area"] == "image"


# ---------------------------------------------------------------- queues
TREE = [{"name": "research", "resources": {"gpu": {"quota": 2, "limit": -1}}},
        {"name": "inference", "parent": "research", "resources": {"gpu": {"quota": 2, "limit": 2}}}]


def live_of(plan):
    """The cluster after the role applied the plan (with a default the API server adds)."""
    objects = json.loads(json.dumps(plan["objects"]))
    for obj in objects:
        obj["spec"].setdefault("priority", 100)
        obj["metadata"]["uid"] = "u-" + obj["metadata"]["name"]
    return objects


def test_a_queue_tree_as_applied_is_no_drift():
    plan = kai_rules.queue_plan(TREE)
    assert audit.audit_queues(plan, live_of(plan)) == []


def test_queue_drift_is_named_field_by_field():
    plan = kai_rules.queue_plan(TREE)
    live = live_of(plan)
    by = {q["metadata"]["name"]: q for q in live}
    by["inference"]["spec"]["resources"]["gpu"]["limit"] = 4
    gone = by.pop("research")
    extra = json.loads(json.dumps(gone))
    extra["metadata"]["name"] = "old-team"
    unmanaged = {"metadata": {"name": "someone-elses"}, "spec": {}}
    live = list(by.values()) + [extra, unmanaged]
    got = fields(audit.audit_queues(kai_rules.queue_plan(TREE, live=live), live, host="ctl"))
    assert ("research", "(queue)", "present", "(absent)") in got
    assert ("inference", "spec.resources.gpu.limit", 2, 4) in got
    assert ("old-team", "(queue)", "(absent)", "present") in got
    assert not [row for row in got if row[0] == "someone-elses"]


# ---------------------------------------------------------------- report
def test_report_sorts_counts_and_renders_every_finding():
    rows = (audit.audit_values({"a": 1}, {"a": 2}, "kai-scheduler", host="ctl")
            + audit.audit_driver(node(driver={"state": "not_loaded"}), "gpu-01", 615))
    report = audit.audit_report(rows, checked={"gpu_nodes": ["gpu-01"]}, generated="2026-12-01T00:00:00Z")
    assert report["drift"] is True
    assert report["counts"] == {"driver": 1, "release": 1, "image": 0, "queue": 0}
    assert [f["area"] for f in report["findings"]] == ["driver", "release"]
    assert json.loads(json.dumps(report)) == report
    lines = audit.audit_lines(report["findings"])
    assert lines == ["driver gpu-01 loaded driver state: wanted ok, found not_loaded (loaded module none, library none)",
                     "release ctl kai-scheduler values.a: wanted 2, found 1"]
    md = audit.audit_markdown(report)
    assert "## driver" in md and "## release" in md and "## image" not in md
    assert "| ctl | kai-scheduler | values.a | 2 | 1 |  |" in md


def test_an_empty_report_says_no_drift():
    report = audit.audit_report([])
    assert report["drift"] is False
    assert "No drift" in audit.audit_markdown(report)


def test_report_refuses_findings_of_another_shape():
    with pytest.raises(AnsibleFilterError):
        audit.audit_report([{"area": "driver"}])
    with pytest.raises(AnsibleFilterError):
        audit.finding("network", "h", "o", "f", 1, 2)


# ---------------------------------------------------------------- collecting the hosts' findings
def test_every_hosts_findings_are_collected_and_a_missing_audit_is_named():
    drift = audit.finding("driver", "gpu-1", "nvidia-driver-open", "version", "615", "580")
    queue = audit.finding("queue", "ctl", "ml", "quota", 2, 1)
    hostvars = {
        "gpu-1": {"nvidia_driver_audit_findings": [drift]},
        "gpu-2": {},                                               # failed: its driver audit is missing
        "gpu-3": {"smshare_driver_method": "gpu_operator"},        # no host driver to audit
        "ctl": {"kai_scheduler_audit_findings": [], "queues_audit_findings": [queue]},
    }
    found = audit.audit_collect(hostvars, ["gpu-1", "gpu-2", "gpu-3"], ["ctl"], "nvidia_driver_audit_findings",
                                ["kai_scheduler_audit_findings", "gpu_fractioning_audit_findings",
                                 "queues_audit_findings"])
    assert found[:2] == [drift, queue]
    unread = [(f["area"], f["host"], f["object"], f["found"]) for f in found[2:]]
    assert unread == [("driver", "gpu-2", "gpu-2", "not read"), ("release", "ctl", "gpu_fractioning", "not read")]
    assert all(f["detail"] == audit.UNREAD for f in found[2:])


def test_a_host_in_both_groups_is_read_once():
    both = {"h": {"nvidia_driver_audit_findings": [audit.finding("driver", "h", "x", "y", 1, 2)],
                  "queues_audit_findings": []}}
    assert len(audit.audit_collect(both, ["h"], ["h"], "nvidia_driver_audit_findings", ["queues_audit_findings"])) == 1


def test_collect_refuses_what_is_not_a_list():
    with pytest.raises(AnsibleFilterError, match="node_hosts must be a list"):
        audit.audit_collect({}, "gpu-1", [], "k", [])


def test_a_cluster_without_the_queue_api_is_one_finding():
    found = audit.audit_queues({}, [], host="ctl", api_found=False)
    assert [(f["object"], f["field"], f["wanted"], f["found"]) for f in found] == [
        ("scheduling.run.ai/v2 Queue", "(api)", "served", audit.ABSENT)]
