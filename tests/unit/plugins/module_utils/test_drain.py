"""module_utils/drain.py: what stands in a node's drain's way."""
import pytest

from ansible_collections.smshare.kai.plugins.filter import driver_upgrade as filters
from ansible_collections.smshare.kai.plugins.module_utils import drain
from test_gpu_holders import NODE, pod


RESERVATION = pod("gpu-reservation-gpu-01-x7k2p", namespace="kai-resource-reservation", gpus="1", owner=False,
                  annotations={"karpenter.sh/do-not-disrupt": "true"})


def names(rows):
    return [r["namespace"] + "/" + r["name"] for r in rows]


def test_the_drain_plan_sorts_out_reservation_and_bare_pods():
    daemon = pod("agent")
    daemon["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": "agent"}]
    pods = [RESERVATION, pod("half", annotations={"gpu-fraction": "0.5"}, owner=False),
            pod("notes", owner=False), pod("trainer", gpus="1"), daemon,
            pod("static", owner=False, annotations={"kubernetes.io/config.mirror": "abc"}),
            pod("finished", owner=False, phase="Succeeded"), pod("elsewhere", owner=False, node="gpu-02")]
    plan = drain.drain_plan(pods, NODE)
    assert names(plan["reservation"]) == ["kai-resource-reservation/gpu-reservation-gpu-01-x7k2p"]
    # Every bare pod blocks the drain, GPU or not; the static and the finished one do not.
    assert names(plan["bare"]) == ["team-a/half", "team-a/notes"]
    assert [r["why"] for r in plan["bare"]] == ["annotated gpu-fraction", "holds no GPU"]
    assert "then the node stops here" in plan["bare"][0]["action"]


def test_the_do_not_disrupt_pods_are_named_with_their_fate():
    owned = pod("keep", gpus="1", annotations={"karpenter.sh/do-not-disrupt": "true"})
    bare = pod("solo", owner=False, annotations={"karpenter.sh/do-not-disrupt": "True"})
    plan = drain.drain_plan([RESERVATION, owned, bare, pod("plain", gpus="1")], NODE, policy="delete", selective=True)
    fates = {r["name"]: r["action"] for r in plan["do_not_disrupt"]}
    assert sorted(fates) == ["gpu-reservation-gpu-01-x7k2p", "keep", "solo"]
    assert "binder re-creates it" in fates["gpu-reservation-gpu-01-x7k2p"]
    assert fates["keep"] == "evicted by the drain if driver_upgrade_drain_pod_selectors select it"
    assert "then deleted (driver_upgrade_bare_pods: delete)" in fates["solo"]
    assert plan["do_not_disrupt"][1]["text"].startswith(
        "pod team-a/keep (requests nvidia.com/gpu, annotated karpenter.sh/do-not-disrupt): evicted")
    assert plan["do_not_disrupt"][2]["why"] == "holds no GPU, annotated karpenter.sh/do-not-disrupt"


def test_a_forced_drain_leaves_no_bare_pod_to_wait_for_but_still_the_reservation_pods():
    plan = drain.drain_plan([RESERVATION, pod("solo", owner=False)], NODE, force=True)
    assert plan["bare"] == [] and len(plan["reservation"]) == 1


@pytest.mark.parametrize("args, words", [
    (({"items": []}, NODE), "expects a list of Pod objects, got dict"),
    (([], NODE, False, "evict"), "policy is 'evict', not stop or delete"),
])
def test_the_drain_plan_filter_refuses_bad_input(args, words):
    with pytest.raises(filters.AnsibleFilterError, match=words):
        filters.driver_upgrade_drain_plan(*args)


def pdb(name, selector, allowed, namespace="team-a", api="policy/v1", generation=1, observed=1):
    return {"apiVersion": api, "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace, "generation": generation},
            "spec": {"selector": selector},
            "status": {"disruptionsAllowed": allowed, "observedGeneration": observed}}


def web(name, app="web", **kw):
    the_pod = pod(name, **kw)
    the_pod["metadata"]["labels"] = {"app": app, "tier": "front"}
    return the_pod


@pytest.mark.parametrize("selector, labels, v1, matches", [
    ({"matchLabels": {"app": "web"}}, {"app": "web", "tier": "front"}, True, True),
    ({"matchLabels": {"app": "web"}}, {"app": "db"}, True, False),
    ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "api"]}]}, {"app": "api"}, True, True),
    ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}, {"tier": "x"}, True, True),
    ({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, {"tier": "x"}, True, False),
    ({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, {"tier": "x"}, True, True),
    ({"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]}, {"app": "2"}, True, False),
    ({}, {"app": "web"}, True, True),      # policy/v1: an empty selector selects every pod
    ({}, {"app": "web"}, False, False),    # policy/v1beta1: none
    (None, {"app": "web"}, True, False),
])
def test_label_selectors_select_as_the_api_server_does(selector, labels, v1, matches):
    assert drain.selector_matches(selector, labels, empty_matches_all=v1) is matches


def test_a_budget_that_allows_fewer_disruptions_than_the_node_would_take_blocks_it():
    pods = [web("web-1"), web("web-2"), web("web-3", node="gpu-02"), web("db-1", app="db")]
    blocks = drain.budget_blocks([pdb("web", {"matchLabels": {"app": "web"}}, 1),
                                  pdb("db", {"matchLabels": {"app": "db"}}, 1)], pods, NODE)
    assert [(b["name"], b["allowed"], b["pods"]) for b in blocks] == [("web", 1, ["team-a/web-1", "team-a/web-2"])]
    assert blocks[0]["text"] == ("PodDisruptionBudget team-a/web allows 1 disruption(s) now and draining gpu-01 "
                                 "would evict 2 of its pods (team-a/web-1, team-a/web-2)")


@pytest.mark.parametrize("the_pod", [
    web("pending", phase="Pending"),
    web("leaving", deletionTimestamp="2026-12-04T10:00:00Z"),
    web("bare", owner=False),
    web("other-namespace", namespace="team-b"),
    web("gpu-reservation-1", namespace="kai-resource-reservation", owner=False),
])
def test_pods_the_eviction_api_would_not_weigh_against_the_budget_are_left_out(the_pod):
    assert drain.budget_blocks([pdb("web", {"matchLabels": {"app": "web"}}, 0)], [the_pod], NODE) == []


def test_a_daemonset_pod_is_left_by_the_drain_and_a_forced_bare_pod_is_evicted():
    daemon = web("agent")
    daemon["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": "agent"}]
    budget = [pdb("web", {"matchLabels": {"app": "web"}}, 0)]
    assert drain.budget_blocks(budget, [daemon], NODE) == []
    assert [b["pods"] for b in drain.budget_blocks(budget, [web("bare", owner=False)], NODE, force=True)] == \
        [["team-a/bare"]]


def test_a_budget_whose_status_trails_its_spec_allows_nothing():
    stale = pdb("web", {"matchLabels": {"app": "web"}}, 5, generation=3, observed=2)
    assert drain.budget_blocks([stale], [web("web-1")], NODE)[0]["allowed"] == 0


def test_a_pod_under_two_budgets_is_refused_whatever_they_allow():
    budgets = [pdb("web", {"matchLabels": {"app": "web"}}, 5), pdb("front", {"matchLabels": {"tier": "front"}}, 5)]
    blocks = drain.budget_blocks(budgets, [web("web-1")], NODE)
    assert [b["name"] for b in blocks] == ["front, web"]
    assert "falls under 2 PodDisruptionBudgets" in blocks[0]["text"]


def test_an_empty_v1beta1_selector_covers_nothing():
    assert drain.budget_blocks([pdb("all", {}, 0, api="policy/v1beta1")], [web("web-1")], NODE) == []
    assert len(drain.budget_blocks([pdb("all", {}, 0)], [web("web-1")], NODE)) == 1


REFUSED = {"failed": True, "msg": "Failed to delete pod team-a/web-1 due to: Too Many Requests: Cannot evict pod as "
                                  "it would violate the pod's disruption budget."}


@pytest.mark.parametrize("drained, pdbs, pods, message", [
    ({"changed": True, "result": "node gpu-01 drained"}, [], [], ""),
    # The budgets that block the pods still there are named, not the module's words.
    (REFUSED, [pdb("web", {"matchLabels": {"app": "web"}}, 0)], [web("web-1")],
     "The drain of gpu-01 was refused by disruption budgets until driver_upgrade_drain_timeout (600 s): "
     "PodDisruptionBudget team-a/web allows 0 disruption(s) now and draining gpu-01 would evict 1 of its pods "
     "(team-a/web-1). The driver was not changed; once the budgets allow it, run the rollout again."),
    # A budget that allows it again by the time it is read: the module's own message.
    (REFUSED, [pdb("web", {"matchLabels": {"app": "web"}}, 1)], [web("web-1")],
     "The drain of gpu-01 was refused by disruption budgets until driver_upgrade_drain_timeout (600 s): "
     + REFUSED["msg"] + ". The driver was not changed; once the budgets allow it, run the rollout again."),
    ({"failed": True, "msg": "Failed to cordon node gpu-01: Forbidden"}, [], [],
     "The drain of gpu-01 failed: Failed to cordon node gpu-01: Forbidden."),
    ({"failed": True}, [], [], "The drain of gpu-01 failed: no result."),
])
def test_a_drain_that_did_not_go_through_says_why(drained, pdbs, pods, message):
    # The blocks as smshare.kai.disruption_budgets_info reads them after the refusal.
    blocks = drain.budget_blocks(pdbs, pods, NODE)
    assert drain.drain_refusal(drained, blocks, NODE, 600) == message
    assert filters.driver_upgrade_drain_refusal(drained, blocks, NODE, 600) == message


@pytest.mark.parametrize("args, words", [
    (("drained", []), r"expects k8s_drain's result \(a mapping\), got str"),
    (({"failed": True}, {"blocks": []}), r"expects the blocks of smshare.kai.disruption_budgets_info \(a list\), got dict"),
])
def test_the_drain_refusal_filter_refuses_bad_input(args, words):
    with pytest.raises(filters.AnsibleFilterError, match=words):
        filters.driver_upgrade_drain_refusal(*args, NODE, 600)
