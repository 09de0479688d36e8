# -*- coding: utf-8 -*-
# Apache-2.0
"""The rollout plan of a fleet driver upgrade (documentation: driver_upgrade_plan.yml).

A pure function of what the fleet shows (each node's loaded driver branch, its
Kubernetes Node) and the policy (target branch, batch size, maximum of
unavailable nodes): which nodes to upgrade, in which order, in batches of
which sizes, and which to leave alone and why. The playbook turns the order
into a host group and the sizes into `serial`.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import math
import re

from ansible.errors import AnsibleFilterError

from ansible_collections.smshare.kai.plugins.module_utils import drain, gpu_holders

# The GPU Operator's upgrade states (its label nvidia.com/gpu-driver-upgrade-state),
# in the order a node goes through them.
STATES = ["upgrade-required", "cordon-required", "wait-for-jobs-required", "pod-deletion-required",
          "drain-required", "pod-restart-required", "validation-required", "uncordon-required",
          "upgrade-done"]
FAILED = "upgrade-failed"
STATE_LABEL = "nvidia.com/gpu-driver-upgrade-state"
# Ours: every state a rollout moves the node through. The GPU Operator's label
# is written only from pod-restart-required on (the fractioning agents leave
# the node as soon as it is set), so this one says where a rollout stands.
ROLLOUT_LABEL = "smshare.kai/driver-upgrade-state"
# The states in which the rollout has set the GPU Operator's label: the agents are off.
AGENTS_OFF = STATES[STATES.index("pod-restart-required"):-1]
SKIP_LABEL = "nvidia.com/gpu-driver-upgrade.skip"
INITIAL_STATE_ANNOTATION = "nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable"
# Ours: the branch a rollout moves the node to, from its first step until it is
# uncordoned; a re-run finishes every node that still carries it.
TARGET_ANNOTATION = "smshare.kai/driver-upgrade-target"
COUNT = re.compile(r"([0-9]+)(%?)")
# The GPU Operator runs its driver DaemonSet on nodes with this label "true" and
# sets it there itself unless it says "false" (its per-node opt-out) or
# "pre-installed" (it found a host driver and leaves it alone).
OPERATOR_DRIVER_LABEL = "nvidia.com/gpu.deploy.driver"
OPERATOR_LEAVES_DRIVER = ("false", "pre-installed")


def _amount(value, name):
    """(number, is_percent) from 2, "2" or "25%"."""
    if isinstance(value, bool):
        raise AnsibleFilterError("driver_upgrade_plan: %s must be a count or a percentage, got %r" % (name, value))
    match = COUNT.fullmatch(str(value))
    if not match or int(match.group(1)) <= 0 or (match.group(2) and int(match.group(1)) > 100):
        raise AnsibleFilterError("driver_upgrade_plan: %s must be a count above 0 (2) or a percentage "
                                 "from 1%% to 100%% (25%%), got %r" % (name, value))
    return int(match.group(1)), bool(match.group(2))


def resolve_serial(value, rollout):
    """Batch size: a count, or a percentage of the nodes to upgrade (rounded down, at least 1)."""
    number, percent = _amount(value, "serial")
    return max(1, rollout * number // 100) if percent else number


def resolve_max_unavailable(value, total):
    """Maximum of unavailable GPU nodes: a count, or a percentage of all of them (rounded up,
    at least 1), as the GPU Operator's maxUnavailable."""
    number, percent = _amount(value, "max_unavailable")
    return max(1, int(math.ceil(total * number / 100.0))) if percent else number


def _ready_condition(node):
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition
    return {}


def _ready(node):
    return _ready_condition(node).get("status") == "True"


def _meta(node, key):
    return ((node.get("metadata") or {}).get(key)) or {}


def node_view(host, node, loaded_branch, branch):
    """What the plan needs to know of one node."""
    labels, annotations = _meta(node, "labels"), _meta(node, "annotations")
    # Ours first: a node the operator (or a hand) moved carries only the operator's.
    state = labels.get(ROLLOUT_LABEL) or labels.get(STATE_LABEL, "")
    marker = annotations.get(TARGET_ANNOTATION)
    unschedulable = bool((node.get("spec") or {}).get("unschedulable"))
    in_progress = marker is not None or state == FAILED or state in STATES[:-1]
    if in_progress and marker == str(branch) and state in STATES:
        resume = state
    else:   # failed, started by hand or by the operator, or towards another branch: from the start
        resume = STATES[0]
    if in_progress:
        # Cordoned by the rollout itself: the annotation says how the node was before.
        before = INITIAL_STATE_ANNOTATION in annotations
    else:
        before = unschedulable
    return {
        "host": host, "node": node["metadata"]["name"], "state": state, "loaded_branch": loaded_branch,
        "unschedulable": unschedulable, "unavailable": unschedulable or not _ready(node),
        # When a node that is not Ready stopped being Ready ('' when Ready or unknown).
        "not_ready_since": "" if _ready(node) else str(_ready_condition(node).get("lastTransitionTime") or ""),
        "unschedulable_before": before, "in_progress": in_progress, "resume_from": resume,
        "skip_label": str(labels.get(SKIP_LABEL, "")).lower() == "true",
        "annotations": dict(annotations),
    }


def driver_upgrade_node(node, host, loaded_branch, branch):
    """One node's view (where its upgrade resumes, whether it was unschedulable before)."""
    if not node:
        raise AnsibleFilterError("driver_upgrade_node: no Kubernetes Node for %s. Nothing was changed." % host)
    return node_view(host, node, loaded_branch, int(branch))


def driver_upgrade_plan(fleet, nodes, branch, serial=1, max_unavailable="25%"):
    """fleet: [{host, node_name, loaded_branch (int or None), unreachable (optional: why
    Ansible could not reach the host)}] of every GPU node; nodes: the cluster's Node objects.
    An unreachable node is not upgraded and counts as unavailable, so the others go on
    within the budget.

    Returns {order, batches, serial, max_unavailable, unavailable, nodes, skipped}; raises with a
    message that says what to do when no rollout is possible."""
    try:
        branch = int(branch)
    except (TypeError, ValueError):
        raise AnsibleFilterError("driver_upgrade_plan: branch must be a number, got %r" % (branch,))
    by_name = {n.get("metadata", {}).get("name"): n for n in nodes or []}
    missing = ["%s (%s)" % (e["host"], e["node_name"]) for e in fleet if e.get("node_name") not in by_name]
    if missing:
        raise AnsibleFilterError(
            "no Kubernetes Node for %s: each GPU node's Node name is driver_upgrade_node_name "
            "(default: the inventory name). Nothing was changed." % ", ".join(missing))
    views = [node_view(e["host"], by_name[e["node_name"]], e.get("loaded_branch"), branch) for e in fleet]
    for entry, view in zip(fleet, views):
        view["unreachable"] = str(entry.get("unreachable") or "")
        view["unavailable"] = view["unavailable"] or bool(view["unreachable"])
    total = len(views)
    limit = resolve_max_unavailable(max_unavailable, total)
    plan_nodes, skipped, wanted = {}, [], []
    for view in views:
        plan_nodes[view["host"]] = view
        if view["unreachable"]:
            view["action"] = "skip"
            view["reason"] = ("unreachable (%s): not upgraded, counted as unavailable; reach it and run the "
                              "rollout again" % view["unreachable"])
        elif view["skip_label"]:
            view["action"], view["reason"] = "skip", "labelled %s=true" % SKIP_LABEL
        elif view["in_progress"]:
            view["action"], view["reason"] = "resume", "resumes at %s" % view["resume_from"]
        elif view["loaded_branch"] == branch:
            view["action"], view["reason"] = "skip", "already on branch %d" % branch
        else:
            view["action"] = "upgrade"
            view["reason"] = "loaded branch %s" % (view["loaded_branch"] or "none")
        if view["not_ready_since"] and not view["unreachable"]:
            view["reason"] += "; NotReady since %s" % view["not_ready_since"]
        if view["action"] == "skip":
            skipped.append(view["host"])
        else:
            wanted.append(view)
    size = resolve_serial(serial, len(wanted)) if wanted else 0
    # Nodes the rollout already holds go first, then nodes already out of service
    # (they cost no more availability), then the rest in inventory order.
    queue = [v for v in wanted if v["in_progress"]] + \
        [v for v in wanted if not v["in_progress"] and v["unavailable"]] + \
        [v for v in wanted if not v["in_progress"] and not v["unavailable"]]
    unavailable = {v["host"] for v in views if v["unavailable"]}
    at_start = sorted(unavailable)
    order, batches = [], []
    while queue:
        batch, used = [], set(unavailable)
        for view in queue:
            if len(batch) == size:
                break
            if view["host"] in unavailable:
                batch.append(view)
            elif len(used) + 1 <= limit:
                batch.append(view)
                used.add(view["host"])
        if not batch:
            raise AnsibleFilterError(
                "cannot start the next batch: %d GPU node(s) are unavailable (%s) and at most %d may be "
                "(driver_upgrade_max_unavailable %s). Uncordon or repair them, or allow more. %d node(s) "
                "still need the upgrade: %s. Nothing more was changed."
                % (len(unavailable), ", ".join(sorted(unavailable)), limit, max_unavailable, len(queue),
                   ", ".join(v["host"] for v in queue)))
        order += [v["host"] for v in batch]
        batches.append(len(batch))
        done = {v["host"] for v in batch}
        queue = [v for v in queue if v["host"] not in done]
        # After its batch a node is back in service unless it was out of it before.
        unavailable = (unavailable - done) | {v["host"] for v in batch if v["unschedulable_before"]}
    return {"order": order, "batches": batches, "serial": size, "max_unavailable": limit,
            "unavailable": at_start, "nodes": plan_nodes, "skipped": skipped,
            "unreachable": [v["host"] for v in views if v["unreachable"]]}


def driver_upgrade_room(nodes, plan, batch, pings=None):
    """Whether each node of a batch may start, read again when the batch begins: nodes that
    went NotReady or were cordoned since the plan count against max_unavailable as the plan's
    own did, and a node Ansible no longer reaches is left out (and counted).

    nodes: the cluster's Node objects now; plan: driver_upgrade_plan's result; batch: the
    batch's hosts in rollout order; pings: their ansible.builtin.ping results, aligned with
    batch. Returns {host: {state, reason}} for the hosts that must not start (empty: all go)."""
    if not isinstance(nodes, list) or not isinstance(plan, dict) or not isinstance(batch, list):
        raise AnsibleFilterError("driver_upgrade_room: expects the Node objects (a list), the plan (a mapping) "
                                 "and the batch's hosts (a list)")
    pings = list(pings or [])
    if pings and len(pings) != len(batch):
        raise AnsibleFilterError("driver_upgrade_room: %d ping results for a batch of %d" % (len(pings), len(batch)))
    by_name = {n.get("metadata", {}).get("name"): n for n in nodes}
    views = plan.get("nodes") or {}
    limit = int(plan.get("max_unavailable") or 1)

    def out_of_service(host):
        view = views.get(host) or {}
        node = by_name.get(view.get("node", host))
        if node is None or view.get("unreachable"):
            return "unreachable" if view.get("unreachable") else "no Node"
        if (node.get("spec") or {}).get("unschedulable"):
            return "cordoned"
        if not _ready(node):
            since = _ready_condition(node).get("lastTransitionTime")
            return "NotReady since %s" % since if since else "NotReady"
        return ""

    unavailable = {h: why for h, why in ((h, out_of_service(h)) for h in views if h not in batch) if why}
    result = {}
    for i, host in enumerate(batch):
        ping = pings[i] if pings else {}
        if isinstance(ping, dict) and ping.get("unreachable"):
            result[host] = {"state": "unreachable", "reason": (
                "unreachable since the plan (%s): not upgraded, counted as unavailable; reach it and run the "
                "rollout again" % (str(ping.get("msg") or "no answer").strip()[:200]))}
            unavailable[host] = "unreachable"
            continue
        why = out_of_service(host)
        if why:   # out of service already: upgrading it costs no more availability
            unavailable[host] = why
    for host in batch:
        if host in result or host in unavailable:
            continue
        if len(unavailable) + 1 <= limit:
            unavailable[host] = "in this batch"
            continue
        others = ["%s (%s)" % (h, why) for h, why in sorted(unavailable.items())]
        result[host] = {"state": "blocked", "reason": (
            "not cordoned: %d GPU node(s) are unavailable now and at most %d may be (driver_upgrade_max_unavailable): "
            "%s. Repair or uncordon them, or allow more, then run the rollout again"
            % (len(unavailable), limit, ", ".join(others)))}
    return result


def _pod_ready(pod):
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    if meta.get("deletionTimestamp") or status.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def driver_upgrade_agents_back(pods, expected):
    """Whether the fractioning agents a node ran before its upgrade are back: at least
    `expected` of its agent pods Running, Ready and not being deleted.
    Returns {ok, rows: [{pod, ready}], ready, expected, message}."""
    if not isinstance(pods, list):
        raise AnsibleFilterError("driver_upgrade_agents_back: expects the node's agent pods (a list)")
    try:
        expected = int(expected)
    except (TypeError, ValueError):
        raise AnsibleFilterError("driver_upgrade_agents_back: expected must be a count, got %r" % (expected,))
    rows = [{"pod": (p.get("metadata") or {}).get("name", ""), "ready": _pod_ready(p)} for p in pods]
    ready = sum(1 for r in rows if r["ready"])
    names = ", ".join(r["pod"] for r in rows) or "none running"
    return {"ok": ready >= expected, "rows": rows, "ready": ready, "expected": expected,
            "message": "%d of the %d fractioning agent pod(s) the node ran are back and Ready (%s)"
                       % (ready, expected, names)}


def _driver_enabled(policy):
    """A ClusterPolicy's spec.driver.enabled; unset means enabled (the operator's DriverSpec.IsEnabled)."""
    value = (((policy.get("spec") or {}).get("driver") or {}).get("enabled"))
    if value is None:
        return True
    return str(value).strip().lower() not in ("false", "0", "no", "off")


def driver_upgrade_operator_conflicts(policies, nodes, node_names):
    """The GPU Operator ClusterPolicies that manage the driver on the rollout's nodes:
    [{policy, nodes}], one per policy with its driver enabled (or unset) and with nodes
    among node_names whose nvidia.com/gpu.deploy.driver label is neither "false"
    nor "pre-installed"."""
    for name, value in (("policies", policies), ("nodes", nodes), ("node_names", node_names)):
        if not isinstance(value, list):
            raise AnsibleFilterError("driver_upgrade_operator_conflicts: %s must be a list, got %s"
                                     % (name, type(value).__name__))
    wanted = set(str(n) for n in node_names)
    managed = sorted(
        (node.get("metadata") or {}).get("name") for node in nodes
        if (node.get("metadata") or {}).get("name") in wanted
        and str(_meta(node, "labels").get(OPERATOR_DRIVER_LABEL, "")).lower() not in OPERATOR_LEAVES_DRIVER)
    conflicts = []
    for policy in policies:
        if _driver_enabled(policy) and managed:
            conflicts.append({"policy": (policy.get("metadata") or {}).get("name") or "?", "nodes": managed})
    return conflicts


def gpu_holding_pods(pods, node_name):
    """The pods bound to node_name that still hold a GPU (module_utils/gpu_holders.py)."""
    if not isinstance(pods, list):
        raise AnsibleFilterError("gpu_holding_pods: expects a list of Pod objects, got %s" % type(pods).__name__)
    return gpu_holders.holding_pods(pods, node_name)


def driver_upgrade_mps_holders(clients, pods=None):
    """The MPS clients still attached to a node's daemon, as holder rows (module_utils/gpu_holders.py)."""
    if not isinstance(clients, list):
        raise AnsibleFilterError("driver_upgrade_mps_holders: expects mps_info's state.clients (a list), got %s"
                                 % type(clients).__name__)
    if pods is not None and not isinstance(pods, list):
        raise AnsibleFilterError("driver_upgrade_mps_holders: pods must be a list of Pod objects, got %s"
                                 % type(pods).__name__)
    return gpu_holders.mps_client_rows(clients, pods)


def driver_upgrade_drain_plan(pods, node_name, force=False, policy="stop", selective=False):
    """What stands in the drain's way on node_name (module_utils/drain.py)."""
    if not isinstance(pods, list):
        raise AnsibleFilterError("driver_upgrade_drain_plan: expects a list of Pod objects, got %s"
                                 % type(pods).__name__)
    if policy not in ("stop", "delete"):
        raise AnsibleFilterError("driver_upgrade_drain_plan: policy is %r, not stop or delete" % (policy,))
    return drain.drain_plan(pods, node_name, bool(force), policy, bool(selective))


def driver_upgrade_budget_blocks(pdbs, pods, node_name, force=False):
    """The PodDisruptionBudgets a drain of node_name would violate now (module_utils/drain.py)."""
    for what, value in (("PodDisruptionBudget", pdbs), ("Pod", pods)):
        if not isinstance(value, list):
            raise AnsibleFilterError("driver_upgrade_budget_blocks: expects a list of %s objects, got %s"
                                     % (what, type(value).__name__))
    return drain.budget_blocks(pdbs, pods, node_name, bool(force))


class FilterModule(object):
    def filters(self):
        return {"driver_upgrade_plan": driver_upgrade_plan, "driver_upgrade_node": driver_upgrade_node,
                "gpu_holding_pods": gpu_holding_pods, "driver_upgrade_mps_holders": driver_upgrade_mps_holders,
                "driver_upgrade_drain_plan": driver_upgrade_drain_plan,
                "driver_upgrade_budget_blocks": driver_upgrade_budget_blocks,
                "driver_upgrade_room": driver_upgrade_room,
                "driver_upgrade_agents_back": driver_upgrade_agents_back,
                "driver_upgrade_operator_conflicts": driver_upgrade_operator_conflicts}
