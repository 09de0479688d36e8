# Apache-2.0
"""The rollout plan: which nodes, in which order and batches, and why others are left alone."""
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.smshare.kai.plugins.filter import driver_upgrade as du
from ansible_collections.smshare.kai.plugins.module_utils import driver_upgrade as rules

REPO = Path(__file__).resolve().parents[4]
STATE = rules.STATE_LABEL


def node(name, unschedulable=False, ready=True, labels=None, annotations=None):
    return {"metadata": {"name": name, "labels": dict(labels or {}), "annotations": dict(annotations or {})},
            "spec": {"unschedulable": True} if unschedulable else {},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def fleet(*entries):
    """entries: (name, loaded branch, Node); returns (fleet, nodes) as the role passes them."""
    return ([{"host": name, "node_name": name, "loaded_branch": branch} for name, branch, _node in entries],
            [entry[2] for entry in entries])


def plan(entries, serial=1, max_unavailable="25%", branch=615):
    hosts, nodes = fleet(*entries)
    return du.driver_upgrade_plan(hosts, nodes, branch, serial, max_unavailable)


def four_on_580(**overrides):
    return [(f"n{i}", 580, overrides.get(f"n{i}", node(f"n{i}"))) for i in range(1, 5)]


def test_nodes_on_the_branch_are_left_alone():
    result = plan([("a", 615, node("a")), ("b", 615, node("b"))])
    assert result["order"] == [] and result["batches"] == []
    assert result["skipped"] == ["a", "b"]
    assert result["nodes"]["a"]["reason"] == "already on branch 615"


def test_batches_of_two_within_two_unavailable():
    result = plan(four_on_580() + [("n5", 615, node("n5"))], serial=2, max_unavailable=2)
    assert result["order"] == ["n1", "n2", "n3", "n4"]
    assert result["batches"] == [2, 2]
    assert result["skipped"] == ["n5"]


def test_a_cordoned_node_goes_first_and_keeps_its_slot_after():
    # n3 was cordoned by someone: it costs no new slot, but it stays cordoned
    # after its upgrade, so every later batch has one slot less.
    result = plan(four_on_580(n3=node("n3", unschedulable=True)), serial=2, max_unavailable=2)
    assert result["order"] == ["n3", "n1", "n2", "n4"]
    assert result["batches"] == [2, 1, 1]
    assert result["unavailable"] == ["n3"]
    assert result["nodes"]["n3"]["unschedulable_before"] is True
    assert result["nodes"]["n1"]["unschedulable_before"] is False


def test_unavailable_nodes_outside_the_rollout_count():
    entries = four_on_580() + [("n5", 615, node("n5", ready=False))]
    result = plan(entries, serial=2, max_unavailable=2)
    assert result["batches"] == [1, 1, 1, 1]


def test_no_slot_left_is_refused_with_what_to_do():
    entries = four_on_580() + [("n5", 615, node("n5", unschedulable=True)),
                               ("n6", 615, node("n6", ready=False))]
    with pytest.raises(AnsibleFilterError) as err:
        plan(entries, serial=2, max_unavailable=2)
    text = str(err.value)
    assert "n5, n6" in text and "at most 2" in text and "Nothing more was changed" in text


def test_skip_label():
    result = plan(four_on_580(n2=node("n2", labels={rules.SKIP_LABEL: "true"})), serial=4, max_unavailable=4)
    assert "n2" not in result["order"] and "n2" in result["skipped"]
    assert rules.SKIP_LABEL in result["nodes"]["n2"]["reason"]


def test_an_interrupted_node_resumes_first_where_it_stopped():
    stopped = node("n4", unschedulable=True, labels={STATE: "drain-required"},
                   annotations={rules.TARGET_ANNOTATION: "615"})
    result = plan(four_on_580(n4=stopped), serial=1, max_unavailable=1)
    assert result["order"][0] == "n4"
    view = result["nodes"]["n4"]
    assert view["action"] == "resume" and view["resume_from"] == "drain-required"
    # Cordoned by the rollout, not before it: uncordoned at the end.
    assert view["unschedulable_before"] is False
    assert result["batches"] == [1, 1, 1, 1]


@pytest.mark.parametrize("labels, expected", [
    # Before the agents' step only the rollout's label moves (the operator's stays as a past rollout left it).
    ({rules.ROLLOUT_LABEL: "wait-for-jobs-required", STATE: "upgrade-done"}, "wait-for-jobs-required"),
    ({rules.ROLLOUT_LABEL: "drain-required"}, "drain-required"),
    ({rules.ROLLOUT_LABEL: "validation-required", STATE: "validation-required"}, "validation-required"),
    # A node an earlier release of the rollout (or a hand) marked carries only the operator's label.
    ({STATE: "pod-restart-required"}, "pod-restart-required"),
])
def test_the_rollout_label_says_where_a_node_resumes(labels, expected):
    stopped = node("n4", unschedulable=True, labels=labels, annotations={rules.TARGET_ANNOTATION: "615"})
    view = plan(four_on_580(n4=stopped), serial=1, max_unavailable=1)["nodes"]["n4"]
    assert view["action"] == "resume" and view["resume_from"] == expected and view["state"] == expected


def test_the_agents_are_off_only_after_the_drain():
    assert rules.AGENTS_OFF == ["pod-restart-required", "validation-required", "uncordon-required"]
    assert rules.STATES.index(rules.AGENTS_OFF[0]) > rules.STATES.index("drain-required")


def test_a_node_already_on_the_branch_but_not_finished_is_finished():
    # Killed after its reboot: the driver is new, the node still cordoned.
    stopped = node("n1", unschedulable=True, labels={STATE: "upgrade-done"},
                   annotations={rules.TARGET_ANNOTATION: "615"})
    result = plan([("n1", 615, stopped), ("n2", 615, node("n2"))])
    assert result["order"] == ["n1"]
    assert result["nodes"]["n1"]["resume_from"] == "upgrade-done"


def test_a_failed_node_starts_over_and_remembers_it_was_cordoned_before():
    failed = node("n1", unschedulable=True, labels={STATE: "upgrade-failed"},
                  annotations={rules.TARGET_ANNOTATION: "615", rules.INITIAL_STATE_ANNOTATION: "true"})
    view = plan(four_on_580(n1=failed), serial=2, max_unavailable=2)["nodes"]["n1"]
    assert view["resume_from"] == "upgrade-required"
    assert view["unschedulable_before"] is True


def test_a_node_moving_to_another_branch_starts_over():
    other = node("n1", unschedulable=True, labels={STATE: "validation-required"},
                 annotations={rules.TARGET_ANNOTATION: "620"})
    assert plan(four_on_580(n1=other))["nodes"]["n1"]["resume_from"] == "upgrade-required"


@pytest.mark.parametrize("serial, count, expected", [(2, 4, 2), ("2", 4, 2), ("50%", 4, 2),
                                                     ("10%", 4, 1), ("100%", 3, 3)])
def test_serial(serial, count, expected):
    assert rules.resolve_serial(serial, count) == expected


@pytest.mark.parametrize("value, total, expected", [(2, 5, 2), ("25%", 5, 2), ("25%", 4, 1),
                                                    ("1%", 1, 1), ("100%", 5, 5)])
def test_max_unavailable_rounds_up_like_the_operator(value, total, expected):
    assert rules.resolve_max_unavailable(value, total) == expected


@pytest.mark.parametrize("bad", [0, "0", "-1", "150%", "0%", "two", "", None, True, "2 %%", "2\n"])
def test_bad_amounts_are_refused(bad):
    with pytest.raises(rules.RolloutError) as err:
        rules.resolve_serial(bad, 4)
    assert "serial must be a count" in str(err.value)


def test_a_host_without_a_node_is_refused():
    hosts, nodes = fleet(("a", 580, node("a")))
    hosts.append({"host": "b", "node_name": "b.example", "loaded_branch": 580})
    with pytest.raises(AnsibleFilterError) as err:
        du.driver_upgrade_plan(hosts, nodes, 615)
    assert "b (b.example)" in str(err.value) and "driver_upgrade_node_name" in str(err.value)


def test_the_role_names_the_keys_the_rules_read():
    """The states live in the rules alone (the role reads each node's `todo`); the Node
    keys the role writes are the ones the rules read."""
    role_vars = yaml.safe_load((REPO / "roles" / "driver_upgrade" / "vars" / "main.yml").read_text())
    assert not [k for k in role_vars if "states" in k], "the states have one home: module_utils/driver_upgrade.py"
    for key, value in rules.KEYS.items():
        assert role_vars["__driver_upgrade_" + key] == value, key


def test_an_unreachable_node_is_skipped_counted_unavailable_and_the_others_go_on():
    hosts, nodes = fleet(*four_on_580(n2=node("n2", ready=False)))
    hosts[1]["unreachable"] = "podman exec failed"
    result = du.driver_upgrade_plan(hosts, nodes, 615, 2, 2)
    assert result["order"] == ["n1", "n3", "n4"] and result["unreachable"] == ["n2"]
    assert result["batches"] == [1, 1, 1], "its slot is taken for the whole rollout"
    assert result["nodes"]["n2"]["action"] == "skip" and result["unavailable"] == ["n2"]
    assert result["nodes"]["n2"]["reason"].startswith("unreachable (podman exec failed): not upgraded")
    # Reachable but NotReady is still a node to upgrade (its driver may be why), and it goes first.
    hosts[1].pop("unreachable")
    assert du.driver_upgrade_plan(hosts, nodes, 615, 2, 2)["order"][0] == "n2"


def test_a_node_that_is_not_ready_says_since_when():
    late = node("n2", ready=False)
    late["status"]["conditions"][0]["lastTransitionTime"] = "2026-12-04T20:01:02Z"
    hosts, nodes = fleet(*four_on_580(n2=late))
    result = du.driver_upgrade_plan(hosts, nodes, 615, 2, 2)
    assert result["nodes"]["n2"]["not_ready_since"] == "2026-12-04T20:01:02Z"
    assert result["nodes"]["n2"]["reason"] == "loaded branch 580; NotReady since 2026-12-04T20:01:02Z"
    assert result["nodes"]["n1"]["not_ready_since"] == "" and result["nodes"]["n1"]["reason"] == "loaded branch 580"


# ---------------------------------------------------------------- a second owner of the driver
def policy(name="cluster-policy", enabled="unset"):
    spec = {"driver": {}} if enabled == "unset" else {"driver": {"enabled": enabled}}
    return {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": name}, "spec": spec}


@pytest.mark.parametrize("enabled", ["unset", True, "true"])
def test_a_cluster_policy_with_the_driver_on_is_a_second_owner(enabled):
    nodes = [node("n1"), node("n2", labels={"nvidia.com/gpu.deploy.driver": "true"}), node("n3")]
    assert du.driver_upgrade_operator_conflicts([policy(enabled=enabled)], nodes, ["n2", "n1"]) == [
        {"policy": "cluster-policy", "nodes": ["n1", "n2"]}]


def test_no_conflict_when_the_operator_leaves_the_driver_or_the_nodes_alone():
    opted_out = [node("n1", labels={"nvidia.com/gpu.deploy.driver": "false"})]
    assert du.driver_upgrade_operator_conflicts([policy(enabled=False)], [node("n1")], ["n1"]) == []
    assert du.driver_upgrade_operator_conflicts([policy()], opted_out, ["n1"]) == []
    found_host_driver = [node("n1", labels={"nvidia.com/gpu.deploy.driver": "pre-installed"})]
    assert du.driver_upgrade_operator_conflicts([policy()], found_host_driver, ["n1"]) == []
    assert du.driver_upgrade_operator_conflicts([], [node("n1")], ["n1"]) == []
    assert du.driver_upgrade_operator_conflicts([policy()], [node("n1")], ["n9"]) == []


def test_the_conflict_filter_refuses_what_is_not_a_list():
    with pytest.raises(AnsibleFilterError, match="policies must be a list"):
        du.driver_upgrade_operator_conflicts({"items": []}, [], [])


# ---------------------------------------------------------------- room when a batch begins
def started(entries, **kw):
    """The plan for entries, and the Nodes as they are now (the plan's, unless replaced)."""
    result = plan(entries, **kw)
    return result, [entry[2] for entry in entries]


def test_a_batch_starts_when_nothing_changed_since_the_plan():
    result, nodes = started(four_on_580(), serial=2, max_unavailable=2)
    assert du.driver_upgrade_room(nodes, result, ["n1", "n2"]) == {}


def test_a_node_gone_notready_since_the_plan_takes_a_slot():
    result, nodes = started(four_on_580(), serial=1, max_unavailable=1)
    nodes[3] = node("n4", ready=False)   # n4 (a later batch) went NotReady while n1 was upgraded
    nodes[3]["status"]["conditions"][0]["lastTransitionTime"] = "2026-12-05T02:00:00Z"
    room = du.driver_upgrade_room(nodes, result, ["n2"])
    assert room["n2"]["state"] == "blocked"
    assert room["n2"]["reason"].startswith("not cordoned: 1 GPU node(s) are unavailable now and at most 1 may be")
    assert "n4 (NotReady since 2026-12-05T02:00:00Z)" in room["n2"]["reason"]


def test_a_node_cordoned_by_someone_since_the_plan_takes_a_slot_and_the_batch_shrinks():
    result, nodes = started(four_on_580(), serial=2, max_unavailable=2)
    nodes[2] = node("n3", unschedulable=True)
    room = du.driver_upgrade_room(nodes, result, ["n1", "n2"])
    assert list(room) == ["n2"] and "n3 (cordoned)" in room["n2"]["reason"] and "n1 (in this batch)" in room["n2"]["reason"]


def test_a_batch_node_already_out_of_service_costs_nothing_more():
    result, nodes = started(four_on_580(), serial=2, max_unavailable=1)
    nodes[0] = node("n1", ready=False)   # the batch's own node went NotReady: it is upgraded, as planned
    assert du.driver_upgrade_room(nodes, result, ["n1"]) == {}


def test_a_batch_node_ansible_no_longer_reaches_is_left_out_and_counted():
    result, nodes = started(four_on_580(), serial=2, max_unavailable=2)
    pings = [{"unreachable": True, "msg": "Failed to connect to the host via podman"}, {"ping": "pong"}]
    room = du.driver_upgrade_room(nodes, result, ["n1", "n2"], pings)
    assert room == {"n1": {"state": "unreachable", "reason": (
        "unreachable since the plan (Failed to connect to the host via podman): not upgraded, counted as "
        "unavailable; reach it and run the rollout again")}}
    result, nodes = started(four_on_580(), serial=2, max_unavailable=1)
    room = du.driver_upgrade_room(nodes, result, ["n1", "n2"], pings)
    assert room["n1"]["state"] == "unreachable" and room["n2"]["state"] == "blocked"
    assert "n1 (unreachable)" in room["n2"]["reason"]


@pytest.mark.parametrize("args, words", [
    (({}, {}, []), "expects the Node objects"),
    (([], {}, ["n1"], [{}, {}]), "2 ping results for a batch of 1"),
])
def test_room_refuses_what_it_cannot_read(args, words):
    with pytest.raises(AnsibleFilterError) as err:
        du.driver_upgrade_room(*args)
    assert words in str(err.value)


# ---------------------------------------------------------------- the agents back after the upgrade
def agents_back(pods, expected):
    return du.driver_upgrade_check(pods, "agents_back", expected)


def agent(name, phase="Running", ready=True, deleting=False):
    meta = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-06T02:00:00Z"
    return {"metadata": meta, "status": {"phase": phase, "conditions": [
        {"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "True" if ready else "False"}]}}


@pytest.mark.parametrize("pods, expected, ok, ready", [
    ([agent("mpsd-a"), agent("fractiond-b")], 2, True, 2),
    ([agent("mpsd-a"), agent("fractiond-b")], "2", True, 2),
    ([agent("mpsd-a"), agent("fractiond-b", ready=False)], 2, False, 1),
    ([agent("mpsd-a"), agent("fractiond-b", phase="Pending", ready=False)], 2, False, 1),
    ([agent("mpsd-a", deleting=True), agent("fractiond-b")], 2, False, 1),   # the old pod, on its way out
    ([], 2, False, 0),
    ([agent("mpsd-a"), agent("fractiond-b"), agent("metricsd-c")], 2, True, 3),
])
def test_the_agents_are_back_when_as_many_run_ready(pods, expected, ok, ready):
    back = agents_back(pods, expected)
    assert (back["ok"], back["ready"], back["expected"]) == (ok, ready, int(expected))


def test_the_agents_message_names_the_pods_or_says_none_run():
    back = agents_back([agent("mpsd-a"), agent("fractiond-b", ready=False)], 2)
    assert back["message"] == "1 of the 2 fractioning agent pod(s) the node ran are back and Ready (mpsd-a, fractiond-b)"
    assert back["rows"] == [{"pod": "mpsd-a", "ready": True}, {"pod": "fractiond-b", "ready": False}]
    assert agents_back([], 2)["message"].endswith("(none running)")


def test_a_pod_whose_ready_condition_is_true_counts_whatever_jmespath_makes_of_negations():
    # The wait once read `[?!metadata.deletionTimestamp && ...]`, which jmespath 1.1.0 parses as
    # (!metadata).deletionTimestamp: no pod ever matched, and every upgraded node timed out.
    assert agents_back([agent("mpsd-a")], 1)["ok"]


@pytest.mark.parametrize("args, words", [
    (({"items": []}, 1), "the node's agent pods must be a list"),
    (([], "two"), "expected must be a count"),
])
def test_agents_back_refuses_what_it_cannot_read(args, words):
    with pytest.raises(AnsibleFilterError) as err:
        agents_back(*args)
    assert words in str(err.value)
