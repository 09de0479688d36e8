# Apache-2.0
"""The filters are the engine's rules, reachable from Jinja."""
import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.smshare.kai.plugins.filter import kai_rules

POD = {"kind": "Pod", "metadata": {"name": "p", "annotations": {"gpu-fraction": "2"}},
       "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c"}]}}


def test_filters_are_registered():
    assert set(kai_rules.FilterModule().filters()) == {"workload_lint", "queue_plan", "gpu_capacity"}


def test_workload_lint_takes_one_object_or_a_list():
    one = kai_rules.workload_lint(POD)
    assert [f["rule"] for f in one] == ["gpu-fraction-range", "queue-label-missing", "fraction-runs-as-root"]
    assert one == kai_rules.workload_lint([POD])
    assert one[0]["text"].startswith("ERROR: Pod p: metadata.annotations[gpu-fraction]: '2' must be")


def test_workload_lint_with_a_queue_tree():
    pod = dict(POD, metadata={"name": "p", "labels": {"kai.scheduler/queue": "parent"}})
    found = kai_rules.workload_lint(pod, queues=[{"name": "parent"}, {"name": "leaf", "parent": "parent"}])
    assert [f["rule"] for f in found] == ["queue-not-leaf"]


def test_workload_lint_refuses_other_input():
    with pytest.raises(AnsibleFilterError) as info:
        kai_rules.workload_lint("kind: Pod")
    assert "expects a Kubernetes object or a list of them, got str" in str(info.value)


def test_queue_plan():
    plan = kai_rules.queue_plan([{"name": "a", "resources": {"gpu": {"quota": 1, "limit": 0.5}}}])
    assert plan["errors"] == ["queue a: resources.gpu: limit 0.5 is below the quota 1 (GPUs); the limit is a hard "
                              "cap: set it to at least 1, or -1 for no limit"]
    assert [o["metadata"]["name"] for o in plan["objects"]] == ["a"]
