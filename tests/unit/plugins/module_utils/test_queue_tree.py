# Apache-2.0
"""The queue tree: inventory shape, every tree rule (valid and invalid, each
message) and the plan the queues role applies."""
import pytest

from ansible_collections.smshare.kai.plugins.module_utils import queue_tree as qt


def q(name, parent=None, **resources):
    item = {"name": name}
    if parent:
        item["parent"] = parent
    if resources:
        item["resources"] = resources
    return item


def live(name, parent=None, managed=False, resources=None):
    obj = {"apiVersion": qt.API_VERSION, "kind": "Queue", "metadata": {"name": name}, "spec": {}}
    if managed:
        obj["metadata"]["labels"] = {qt.MANAGED_BY[0]: qt.MANAGED_BY[1]}
    if parent:
        obj["spec"]["parentQueue"] = parent
    if resources is not None:
        obj["spec"]["resources"] = resources
    return obj


def errors(items, **kwargs):
    return qt.plan(items, **kwargs)["errors"]


def warnings(items, **kwargs):
    return qt.plan(items, **kwargs)["warnings"]


GOOD_TREE = [
    q("research", gpu={"quota": 4, "limit": 8}, cpu={"quota": 16000, "limit": -1}, memory={"quota": 128000}),
    q("ml-team", "research", gpu={"quota": 2.5, "limit": 4, "over_quota_weight": 2}, cpu={"quota": 8000}),
    q("cv-team", "research", gpu={"quota": 1.5}, memory={"quota": 64000, "limit": 128000}),
]


# ---------------------------------------------------------------- valid trees
def test_a_good_tree_has_no_problems():
    result = qt.plan(GOOD_TREE, workload_queues=["ml-team", "cv-team"])
    assert result["errors"] == [] and result["warnings"] == []
    assert result["tree"] == {"research": None, "ml-team": "research", "cv-team": "research"}
    assert result["tree_text"] == ["cv-team (in research)", "ml-team (in research)", "research"]


def test_objects_carry_every_number_and_the_managed_label():
    obj = qt.plan([{"name": "ml-team", "display_name": "ML Team", "parent": "research", "priority": 200,
                    "resources": {"gpu": {"quota": 1, "limit": 2.0}}}, q("research", gpu={"quota": 1})]
                  )["objects"][1]
    assert obj == {
        "apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
        "metadata": {"name": "ml-team", "labels": {"app.kubernetes.io/managed-by": "smshare.kai"}},
        "spec": {"displayName": "ML Team", "parentQueue": "research", "priority": 200, "resources": {
            "gpu": {"quota": 1, "limit": 2, "overQuotaWeight": 1},
            "cpu": {"quota": 0, "limit": -1, "overQuotaWeight": 1},
            "memory": {"quota": 0, "limit": -1, "overQuotaWeight": 1}}}}
    assert isinstance(obj["spec"]["resources"]["gpu"]["limit"], int)


def test_numeric_strings_are_numbers():
    result = qt.plan([q("a", gpu={"quota": "0.5", "limit": "2"}, cpu={"quota": "1500"})])
    assert result["errors"] == []
    assert result["objects"][0]["spec"]["resources"]["gpu"] == {"quota": 0.5, "limit": 2, "overQuotaWeight": 1}


def test_parents_come_before_children_and_prune_goes_children_first():
    items = [q("c", "b"), q("b", "a"), q("a")]
    assert [o["metadata"]["name"] for o in qt.plan(items)["objects"]] == ["a", "b", "c"]
    cluster = [live("x", managed=True), live("y", "x", managed=True), live("z", "y", managed=True)]
    result = qt.plan([q("a")], live=cluster, prune=True)
    assert result["prune"] == ["z", "y", "x"] and result["errors"] == []


def test_without_prune_managed_queues_stay_in_the_tree():
    cluster = [live("old", managed=True)]
    result = qt.plan([q("a")], live=cluster, prune=False)
    assert result["prune"] == [] and "old" in result["tree"]


def test_prune_never_touches_unmanaged_queues():
    cluster = [live("default-parent-queue"), live("default-queue", "default-parent-queue")]
    result = qt.plan([q("a", "default-parent-queue")], live=cluster, prune=True)
    assert result["prune"] == [] and result["errors"] == []


def test_declaring_an_unmanaged_queue_adopts_it():
    result = qt.plan([q("default-queue")], live=[live("default-queue")])
    assert result["adopt"] == ["default-queue"]


def test_parent_unlimited_quota_accepts_any_children():
    items = [q("p", gpu={"quota": -1, "limit": -1}), q("a", "p", gpu={"quota": 100}), q("b", "p", gpu={"quota": -1})]
    assert errors(items) == []


def test_children_exactly_filling_the_parent_are_fine():
    items = [q("p", gpu={"quota": 1}), q("a", "p", gpu={"quota": 0.7}), q("b", "p", gpu={"quota": 0.3})]
    assert errors(items) == []


# ---------------------------------------------------------------- shape errors
@pytest.mark.parametrize("items, message", [
    ("research", "the queue list must be a list of queues, got str"),
    (["research"], "queue #1: must be a mapping with at least `name`, got 'research'"),
    ([{"display_name": "x"}], "queue #1: name=None: must be a Kubernetes object name"),
    ([{"name": "ML_Team"}], "queue #1: name='ML_Team': must be a Kubernetes object name"),
    ([q("a"), q("a")], "queue a: is declared more than once"),
    ([{"name": "a", "quota": 1}], "queue a: unknown key quota; a queue takes name, display_name, parent, "
                                  "priority, resources"),
    ([{"name": "a", "parent": "Bad Parent"}], "queue a: parent='Bad Parent': must name a queue"),
    ([{"name": "a", "display_name": "two\nlines"}], "queue a: display_name='two\\nlines': must be text on one line"),
    ([{"name": "a", "priority": "high"}], "queue a: priority='high': must be a whole number"),
    ([{"name": "a", "priority": 1.5}], "queue a: priority=1.5: must be a whole number"),
    ([{"name": "a", "resources": ["gpu"]}], "queue a: resources must be a mapping of cpu, gpu and memory"),
    ([q("a", gpus={"quota": 1})], "queue a: resources.gpus: unknown resource; KAI queues take cpu, gpu, memory"),
    ([q("a", gpu=1)], "queue a: resources.gpu must be a mapping of quota, limit and over_quota_weight"),
    ([q("a", gpu={"qouta": 1})], "queue a: resources.gpu.qouta: unknown key; a resource takes quota, limit and "
                                 "over_quota_weight"),
    ([q("a", memory={"quota": "32Gi"})], "queue a: resources.memory.quota='32Gi': must be a number in megabytes "
                                         "(MB, 10^6 bytes); for example 32000"),
    ([q("a", gpu={"quota": True})], "queue a: resources.gpu.quota=True: must be a number in GPU devices"),
    ([q("a", gpu={"quota": -2})], "queue a: resources.gpu.quota=-2: must be -1 (unlimited) or 0 or more"),
    ([q("a", cpu={"limit": -5})], "queue a: resources.cpu.limit=-5: must be -1 (no limit) or 0 or more"),
    ([q("a", cpu={"quota": 1.5})], "queue a: resources.cpu.quota=1.5: must be a whole number of millicores"),
    ([q("a", gpu={"over_quota_weight": -1})], "queue a: resources.gpu.over_quota_weight=-1: must be 0 or more"),
])
def test_shape_errors(items, message):
    found = errors(items)
    assert any(e.startswith(message) for e in found), found


def test_every_shape_error_is_reported_at_once():
    found = errors([q("a", gpu={"quota": "x", "limit": "y"}), {"name": "b", "colour": 1}])
    assert len(found) == 3


def test_shape_errors_stop_before_the_tree_rules():
    # a bad item must not produce misleading tree errors (its children "losing" their parent)
    found = errors([{"name": "p", "priority": "x"}, q("c", "p")])
    assert found == ["queue p: priority='x': must be a whole number from -2147483648 to 2147483647 (higher goes "
                     "first; KAI's default is 100)"]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("field", ["quota", "limit", "over_quota_weight"])
def test_a_quota_that_is_not_a_finite_number_is_refused(field, value):
    found = errors([q("a", gpu={field: value})])
    assert found and found[0].startswith("queue a: resources.gpu.%s=%s: must be a number" % (field, value)), found


def test_a_nan_child_does_not_pass_the_children_over_parent_rule():
    found = errors([q("p", gpu={"quota": 1}), q("c", "p", gpu={"quota": float("nan")})])
    assert found and "must be a number" in found[0], found


def test_a_name_no_queue_label_can_carry_is_refused():
    assert errors([q("a" * 63)]) == []
    found = errors([q("a" * 64)])
    assert found and "at most 63 characters" in found[0] and "kai.scheduler/queue" in found[0], found


@pytest.mark.parametrize("priority", [2 ** 31, -2 ** 31 - 1, 10 ** 30, True])
def test_a_priority_outside_32_bits_is_refused(priority):
    found = errors([{"name": "p", "priority": priority}])
    assert found and "must be a whole number from -2147483648 to 2147483647" in found[0], found


# ---------------------------------------------------------------- tree rules
def test_parent_that_does_not_exist():
    assert errors([q("a", "nowhere")]) == [
        "queue a: parent 'nowhere' does not exist: it is neither declared nor in the cluster"]


def test_parent_in_the_cluster_counts():
    assert errors([q("a", "default-parent-queue")], live=[live("default-parent-queue")]) == []


def test_pruning_a_parent_that_an_unmanaged_queue_still_names():
    found = errors([q("a")], live=[live("team", managed=True), live("sub", "team")], prune=True)
    assert found == ["queue sub: parent 'team' would be pruned (it is not in the inventory) but this queue "
                     "still names it; declare 'team' or move this queue"]


def test_cycle_of_two():
    assert errors([q("a", "b"), q("b", "a")]) == ["queue a: parentQueue forms a cycle: a -> b -> a"]


def test_cycle_of_three_reported_once_from_its_smallest_name():
    assert errors([q("c", "a"), q("a", "b"), q("b", "c"), q("d", "c")]) == [
        "queue a: parentQueue forms a cycle: a -> b -> c -> a"]


def test_own_parent():
    assert errors([q("a", "a")]) == ["queue a: is its own parent"]


def test_limit_below_quota():
    assert errors([q("a", gpu={"quota": 2, "limit": 1})]) == [
        "queue a: resources.gpu: limit 1 is below the quota 2 (GPUs); the limit is a hard cap: set it to at "
        "least 2, or -1 for no limit"]


def test_explicit_limit_zero_below_quota():
    assert errors([q("a", cpu={"quota": 1000, "limit": 0})]) == [
        "queue a: resources.cpu: limit 0 is below the quota 1000 (millicores); the limit is a hard cap: set it "
        "to at least 1000, or -1 for no limit"]


def test_unlimited_quota_with_a_finite_limit():
    found = errors([q("a", gpu={"quota": -1, "limit": 4})])
    assert found == ["queue a: resources.gpu: limit 4 is below the quota -1 (unlimited); set limit -1 or a "
                     "finite quota"]


def test_unset_limit_of_a_live_queue_is_read_as_zero():
    # KAI's meaning of an object written elsewhere: unset limit = 0. Not ours: a warning.
    found = warnings([q("a")], live=[live("legacy", resources={"gpu": {"quota": 2}})])
    assert found == ["queue legacy: resources.gpu: limit 0 (unset, which KAI reads as 0) is below the quota 2 "
                     "(GPUs); the limit is a hard cap: set it to at least 2, or -1 for no limit (no queue of this "
                     "inventory is involved)"]


def test_children_quotas_over_the_parent():
    found = errors([q("p", gpu={"quota": 2}), q("a", "p", gpu={"quota": 1.5}), q("b", "p", gpu={"quota": 1})])
    assert found == ["queue p: resources.gpu: the child queues' quotas add up to 2.5 (a 1.5, b 1), more than this "
                     "parent's quota 2 (GPUs): the parent cannot guarantee them"]


def test_children_over_a_parent_without_quota():
    found = errors([q("p"), q("a", "p", memory={"quota": 1000})])
    assert found == ["queue p: resources.memory: the child queues' quotas add up to 1000 (a 1000), more than this "
                     "parent's quota 0 (MB): the parent cannot guarantee them"]


def test_unlimited_child_under_a_finite_parent():
    found = errors([q("p", cpu={"quota": 4000}), q("a", "p", cpu={"quota": -1}), q("b", "p", cpu={"quota": -1})])
    assert found == ["queue p: resources.cpu: child queues a, b have an unlimited quota (-1) but this parent's "
                     "quota is 4000"]
    single = errors([q("p", cpu={"quota": 4000}), q("a", "p", cpu={"quota": -1})])
    assert single == ["queue p: resources.cpu: child queue a has an unlimited quota (-1) but this parent's quota "
                      "is 4000"]


def test_children_over_an_unmanaged_parent_are_still_our_error():
    found = errors([q("a", "theirs", gpu={"quota": 3})], live=[live("theirs", resources={"gpu": {"quota": 2}})])
    assert found == ["queue theirs: resources.gpu: the child queues' quotas add up to 3 (a 3), more than this "
                     "parent's quota 2 (GPUs): the parent cannot guarantee them"]


def test_workload_queue_that_is_not_a_leaf():
    found = errors(GOOD_TREE, workload_queues=["research"])
    assert found == ["queue research: workloads name this queue (the inventory) but it has child queues "
                     "(cv-team, ml-team): only leaf queues run jobs, so its workloads would never be scheduled; "
                     "submit them to a leaf queue or remove the children"]


def test_live_pods_make_a_queue_a_workload_queue():
    pods = [{"metadata": {"namespace": "ns", "name": "p%d" % i, "labels": {qt.QUEUE_LABEL: "team"}},
             "status": {"phase": "Running"}} for i in range(5)]
    pods.append({"metadata": {"namespace": "ns", "name": "done", "labels": {qt.QUEUE_LABEL: "other"}},
                 "status": {"phase": "Succeeded"}})
    found = errors([q("team"), q("sub", "team")], pods=pods)
    assert found == ["queue team: workloads name this queue (pod ns/p0, pod ns/p1, pod ns/p2 and 2 more) but it "
                     "has child queues (sub): only leaf queues run jobs, so its workloads would never be "
                     "scheduled; submit them to a leaf queue or remove the children"]


def test_workload_queue_missing():
    assert errors([q("a")], workload_queues=["b"]) == ["queue b: workloads name this queue (the inventory) but it "
                                                       "does not exist"]


def test_pods_naming_an_unknown_queue_are_a_warning_unless_we_prune_it():
    pods = [{"metadata": {"namespace": "ns", "name": "p", "labels": {qt.QUEUE_LABEL: "gone"}}}]
    assert warnings([q("a")], pods=pods) == ["queue gone: workloads name this queue (pod ns/p) but it does not exist"]
    found = errors([q("a")], pods=pods, live=[live("gone", managed=True)], prune=True)
    assert found == ["queue gone: workloads name this queue (pod ns/p) but it would be pruned"]


def test_unlimited_quota_is_a_warning():
    assert errors([q("burst", cpu={"quota": -1})]) == []
    assert warnings([q("burst", cpu={"quota": -1})]) == [
        "queue burst: resources.cpu: quota -1 means UNLIMITED (the queue is guaranteed every CPU in the cluster "
        "and reclaims it from the others); 0 means no guarantee: did you mean 0?"]


def test_explicit_zero_limit_is_a_warning():
    assert warnings([q("a", gpu={"limit": 0})]) == [
        "queue a: resources.gpu: limit 0 means nothing may be allocated: pods that request gpu never run in this "
        "queue; -1 means no limit"]
    assert warnings([q("a")]) == []


def test_problems_among_unmanaged_queues_are_warnings():
    cluster = [live("x", "y"), live("y", "x")]
    assert errors([q("a")], live=cluster) == []
    assert warnings([q("a")], live=cluster) == ["queue x: parentQueue forms a cycle: x -> y -> x"]


# ---------------------------------------------------------------- reading
def test_from_object_reads_kai_zero_values():
    queue = qt.from_object(live("a", "p", managed=True, resources={"gpu": {"quota": 1, "limit": 2}}))
    assert queue.parent == "p" and queue.managed
    assert queue.resources["gpu"] == {"quota": 1, "limit": 2, "over_quota_weight": 0}
    assert queue.resources["cpu"] == {"quota": 0, "limit": 0, "over_quota_weight": 0}
    assert ("gpu", "limit") in queue.explicit and ("cpu", "limit") not in queue.explicit


def test_names_and_parents_takes_both_forms():
    tree = qt.names_and_parents([q("a"), q("b", "a"), live("c", "b"), "junk", {"nameless": 1}])
    assert tree == {"a": None, "b": "a", "c": "b"}
    assert qt.children_of(tree) == {"a": ["b"], "b": ["c"], "c": []}


def test_before_the_cluster_is_read_an_undeclared_parent_is_not_a_problem_but_the_rest_is():
    assert errors([q("ml-team", "research")], cluster_unread=True) == []
    assert errors([q("ml-team", "research")]) != []
    found = errors([q("a", "b"), q("b", "a"), q("c", gpu={"quota": 4, "limit": 2})], cluster_unread=True)
    assert len(found) == 2 and any("cycle" in e for e in found) and any("limit" in e for e in found), found


REFUSED = "Failed to get client due to HTTPSConnectionPool(host='127.0.0.1', port=6443): Max retries exceeded " \
          "with url: /version (Caused by NewConnectionError('Connection refused'))"


@pytest.mark.parametrize("results, action, words, absent", [
    pytest.param([{"changed": True}, {"failed": True, "msg": REFUSED}, {"failed": True, "msg": REFUSED}], "apply",
                 ["queue b: Failed to get client", "Every queue after b failed too", "kubectl get --raw /readyz",
                  "Applied (parents first, so the cluster's tree stays consistent): a.", "Not applied: b, c.",
                  "it applies only what is still missing"], [], id="api-server-lost-after-the-first"),
    pytest.param([{"changed": False}, {"changed": True}, {"failed": True, "msg": "admission webhook denied\nthe queue"}],
                 "apply", ["queue c: admission webhook denied the queue.", "Applied (parents first", ": a, b.",
                           "Not applied: c."], ["Every queue after"], id="one-refused-the-rest-written"),
    pytest.param([{"failed": True, "msg": "x" * 1000}], "apply", ["queue a: " + "x" * 397 + "...",
                                                                  "(parents first, so the cluster's tree stays "
                                                                  "consistent): none."], ["x" * 398],
                 id="a-long-message-is-cut"),
    pytest.param([{"changed": True}, {"failed": True, "msg": "conflict"}, {"changed": True}], "prune",
                 ["The queues were not all pruned. queue b: conflict.", "Pruned (children first", ": a, c.",
                  "Not pruned: b.", "it prunes only"], ["Every queue after"], id="prune-children-first"),
    pytest.param([{"changed": True}], "apply", ["the run stopped before every queue was applied", "Not applied: b, c."],
                 [], id="fewer-results-than-queues"),
])
def test_an_interrupted_apply_names_what_was_written_and_what_was_not(results, action, words, absent):
    message = qt.interrupted(results, ["a", "b", "c"][:max(len(results), 3)], action)
    for word in words:
        assert word in message, (word, message)
    for word in absent:
        assert word not in message, (word, message)
    assert "\n" not in message
