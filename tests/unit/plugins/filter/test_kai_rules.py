# Apache-2.0
"""The filters are the engine's rules, reachable from Jinja."""
import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.smshare.kai.plugins.filter import kai_rules

POD = {"kind": "Pod", "metadata": {"name": "p", "annotations": {"gpu-fraction": "2"}},
       "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c"}]}}


def test_filters_are_registered():
    assert set(kai_rules.FilterModule().filters()) == {"workload_lint", "queue_plan", "queues_interrupted", "gpu_capacity"}


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


MANAGED = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
           "metadata": {"name": "old", "labels": {"app.kubernetes.io/managed-by": "smshare.kai"}}, "spec": {}}


@pytest.mark.parametrize("prune, pruned", [(False, []), ("false", []), ("no", []), ("0", []), (0, []),
                                           (True, ["old"]), ("true", ["old"]), ("yes", ["old"])])
def test_queue_plan_reads_prune_as_ansible_does(prune, pruned):
    plan = kai_rules.queue_plan([{"name": "a"}], live=[MANAGED], prune=prune)
    assert plan["prune"] == pruned


@pytest.mark.parametrize("prune", ["maybe", "", None, 2, [True]])
def test_queue_plan_refuses_a_prune_that_is_not_a_boolean(prune):
    with pytest.raises(AnsibleFilterError, match="prune=.* must be a boolean"):
        kai_rules.queue_plan([{"name": "a"}], live=[], prune=prune)


def test_queue_plan_refuses_a_live_list_that_is_a_mapping():
    with pytest.raises(AnsibleFilterError, match="live must be the list of Queue objects"):
        kai_rules.queue_plan([{"name": "a"}], live={"resources": [MANAGED]})


@pytest.mark.parametrize("failed, words", [
    pytest.param({"failed": True, "msg": "One or more items failed", "results": [{"changed": True}, {"failed": True, "msg": "gone"}]},
                 ["queue b: gone.", "Applied (parents first", ": a."], id="a-loop-result"),
    pytest.param({"failed": True, "msg": "template error"}, ["every queue was applied: template error.", "Not applied: a, b."],
                 id="not-a-loop-item"),
    pytest.param([{"changed": True}, {"failed": True, "msg": "gone"}], ["queue b: gone."], id="the-results-alone"),
])
def test_queues_interrupted_reads_a_failed_loop_or_task(failed, words):
    message = kai_rules.queues_interrupted(failed, ["a", "b"])
    for word in words:
        assert word in message, (word, message)


def test_queues_interrupted_refuses_an_unknown_action():
    with pytest.raises(AnsibleFilterError, match="action must be apply or prune"):
        kai_rules.queues_interrupted([], ["a"], "remove")
