# -*- coding: utf-8 -*-
# Apache-2.0
"""The fleet driver upgrade's rules, in one place (role driver_upgrade, filters in
plugins/filter/driver_upgrade.py): the GPU Operator's upgrade states and the keys
the rollout reads and writes on each Node, where a node resumes and which of its
steps are left, the rollout plan and the room for each batch, the checks each
wait ends on ({ok, done, rows, message}), the labels a failed node keeps, and the
report. Pure functions of what they are given: the unit tests call them alone.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import math
import re


class RolloutError(ValueError):
    """Input a rule cannot read; the message says which and what it got."""


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
# Ours: how many fractioning agent pods the node ran (counted once, before they
# leave), and why its upgrade failed.
AGENTS_ANNOTATION = "smshare.kai/driver-upgrade-agents"
FAILURE_ANNOTATION = "smshare.kai/driver-upgrade-failure"
# Every key the role writes on a Node, by the name it gives it (roles/driver_upgrade/vars/main.yml).
KEYS = {"state_label": STATE_LABEL, "rollout_label": ROLLOUT_LABEL,
        "initial_annotation": INITIAL_STATE_ANNOTATION, "target_annotation": TARGET_ANNOTATION,
        "agents_annotation": AGENTS_ANNOTATION, "failure_annotation": FAILURE_ANNOTATION}
COUNT = re.compile(r"([0-9]+)(%?)")
# The GPU Operator runs its driver DaemonSet on nodes with this label "true" and
# sets it there itself unless it says "false" (its per-node opt-out) or
# "pre-installed" (it found a host driver and leaves it alone).
OPERATOR_DRIVER_LABEL = "nvidia.com/gpu.deploy.driver"
OPERATOR_LEAVES_DRIVER = ("false", "pre-installed")


def _amount(value, name):
    """(number, is_percent) from 2, "2" or "25%"."""
    if isinstance(value, bool):
        raise RolloutError("driver_upgrade_plan: %s must be a count or a percentage, got %r" % (name, value))
    match = COUNT.fullmatch(str(value))
    if not match or int(match.group(1)) <= 0 or (match.group(2) and int(match.group(1)) > 100):
        raise RolloutError("driver_upgrade_plan: %s must be a count above 0 (2) or a percentage "
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
        # The states still ahead of the node, from where it resumes: each step runs only if its state is here.
        "todo": STATES[STATES.index(resume):],
    }


def plan(fleet, nodes, branch, serial=1, max_unavailable="25%"):
    """fleet: [{host, node_name, loaded_branch (int or None), unreachable (optional: why
    Ansible could not reach the host)}] of every GPU node; nodes: the cluster's Node objects.
    An unreachable node is not upgraded and counts as unavailable, so the others go on
    within the budget.

    Returns {order, batches, serial, max_unavailable, unavailable, nodes, skipped}; raises with a
    message that says what to do when no rollout is possible."""
    try:
        branch = int(branch)
    except (TypeError, ValueError):
        raise RolloutError("driver_upgrade_plan: branch must be a number, got %r" % (branch,))
    by_name = {n.get("metadata", {}).get("name"): n for n in nodes or []}
    missing = ["%s (%s)" % (e["host"], e["node_name"]) for e in fleet if e.get("node_name") not in by_name]
    if missing:
        raise RolloutError(
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
            raise RolloutError(
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


def room(nodes, rollout, batch, pings=None):
    """Whether each node of a batch may start, read again when the batch begins: nodes that
    went NotReady or were cordoned since the plan count against max_unavailable as the plan's
    own did, and a node Ansible no longer reaches is left out (and counted).

    nodes: the cluster's Node objects now; plan: driver_upgrade_plan's result; batch: the
    batch's hosts in rollout order; pings: their ansible.builtin.ping results, aligned with
    batch. Returns {host: {state, reason}} for the hosts that must not start (empty: all go)."""
    if not isinstance(nodes, list) or not isinstance(rollout, dict) or not isinstance(batch, list):
        raise RolloutError("driver_upgrade_room: expects the Node objects (a list), the plan (a mapping) "
                           "and the batch's hosts (a list)")
    pings = list(pings or [])
    if pings and len(pings) != len(batch):
        raise RolloutError("driver_upgrade_room: %d ping results for a batch of %d" % (len(pings), len(batch)))
    by_name = {n.get("metadata", {}).get("name"): n for n in nodes}
    views = rollout.get("nodes") or {}
    limit = int(rollout.get("max_unavailable") or 1)

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


def _driver_enabled(policy):
    """A ClusterPolicy's spec.driver.enabled; unset means enabled (the operator's DriverSpec.IsEnabled)."""
    value = (((policy.get("spec") or {}).get("driver") or {}).get("enabled"))
    if value is None:
        return True
    return str(value).strip().lower() not in ("false", "0", "no", "off")


def operator_conflicts(policies, nodes, node_names):
    """The GPU Operator ClusterPolicies that manage the driver on the rollout's nodes:
    [{policy, nodes}], one per policy with its driver enabled (or unset) and with nodes
    among node_names whose nvidia.com/gpu.deploy.driver label is neither "false"
    nor "pre-installed"."""
    for name, value in (("policies", policies), ("nodes", nodes), ("node_names", node_names)):
        if not isinstance(value, list):
            raise RolloutError("driver_upgrade_operator_conflicts: %s must be a list, got %s"
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


# -------------------------------------------------------------------- the checks each wait ends on
# Each returns {ok, done, rows, message}: ok, the wait is over and the step may go
# on; done, waiting longer cannot help (ok, or a read that failed); rows, what the
# check saw; message, what is wrong and what to do (the role's assert shows it).
AGAIN = "Then run the rollout again: the node resumes where it stopped."


def _result(ok, rows, message, done=None):
    return {"ok": bool(ok), "done": bool(ok if done is None else done), "rows": rows, "message": message}


def _name(obj):
    return (obj.get("metadata") or {}).get("name", "")


def pod_ready(pod):
    """Running, Ready and not being deleted."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    if meta.get("deletionTimestamp") or status.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


UNREAD_AGENTS = "the node's fractioning agent pods could not be read (the API server did not answer)"


def agents_back(pods, expected, timeout=None):
    """At least `expected` of the node's fractioning agent pods Running and Ready (pods None:
    the read failed, which proves nothing: not ok, and the wait goes on)."""
    expected = _count(expected, "expected")
    if pods is None:
        result = _result(False, [], UNREAD_AGENTS)
        result.update(ready=0, expected=expected)
        return result
    rows = [{"pod": _name(p), "ready": pod_ready(p)} for p in _objects(pods, "the node's agent pods")]
    ready = sum(1 for r in rows if r["ready"])
    message = "%d of the %d fractioning agent pod(s) the node ran are back and Ready (%s)" % (
        ready, expected, ", ".join(r["pod"] for r in rows) or "none running")
    if timeout is not None:
        message += " after driver_upgrade_agent_timeout (%s s). A node without MPS would cap no fraction: it stays " \
                   "cordoned" % timeout
    result = _result(ready >= expected, rows, message)
    result.update(ready=ready, expected=expected)
    return result


def agents_left(pods, timeout, label=STATE_LABEL):
    """No fractioning agent pod left on the node (pods None: the read failed, not ok)."""
    if pods is None:
        return _result(False, [], UNREAD_AGENTS)
    names = [_name(p) for p in _objects(pods, "the node's agent pods")]
    message = ("%d fractioning agent pod(s) still on the node after driver_upgrade_agent_timeout (%s s): %s. Their "
               "DaemonSets must keep off a node whose %s label is set to anything but upgrade-done (a nodeAffinity on "
               "it, as the fractioning operator writes); the driver was not changed"
               % (len(names), timeout, ", ".join(names), label))
    return _result(not names, [{"pod": n} for n in names], message)


def mps_clients(read, holders, timeout, pipe_directory):
    """No MPS client attached to the node's daemon. read: mps_info's result; holders: the
    clients as holder rows (gpu_holders.mps_client_rows), or None before the pods were read."""
    if not isinstance(read, dict):
        raise RolloutError("mps_clients: expects mps_info's result (a mapping), got %s" % type(read).__name__)
    if "state" not in read:
        return _result(False, [], "Reading the MPS daemon of %s failed: %s (driver_upgrade_mps_pipe_directory: empty to "
                                  "not read it). %s" % (pipe_directory, read.get("msg") or "no result", AGAIN), done=True)
    clients = (read.get("state") or {}).get("clients") or []
    rows = list(holders) if holders is not None else [{"text": "client pid %s" % c.get("pid")} for c in clients]
    return _result(not clients, rows, (
        "%d MPS client(s) still attached after driver_upgrade_holders_timeout (%s s), so the driver was not changed: "
        "%s. %s" % (len(rows), timeout, "; ".join(r.get("text", "") for r in rows), AGAIN)))


def gpu_holders(pods_read, processes_read, pod_holders, timeout):
    """Nothing holds a GPU: no pod bound to the node that holds one (pod_holders: their rows,
    gpu_holders.holding_pods), no process with a /dev/nvidia* device open. pods_read: the
    k8s_info result; processes_read: gpu_holders_info's result, or None before it ran."""
    for what, value in (("the pods' read", pods_read), ("the processes' read", processes_read)):
        if value is not None and not isinstance(value, dict):
            raise RolloutError("gpu_holders: %s must be a task result (a mapping), got %s" % (what, type(value).__name__))
    if "resources" not in pods_read:
        message = "Reading the pods on the node failed: %s. %s" % (pods_read.get("msg") or "no result", AGAIN)
        return _result(False, [], message, done=True)
    holders = list(pod_holders or [])
    if processes_read is not None:
        if "holders" not in processes_read:
            return _result(False, holders, "Reading what holds the GPUs failed: %s. %s" % (
                processes_read.get("msg") or "no result", AGAIN), done=True)
        if processes_read.get("unreadable", 1) != 0:
            return _result(False, holders, "The open files of %s process(es) could not be read: the check needs root "
                                           "on the node (become). %s" % (processes_read.get("unreadable"), AGAIN),
                           done=True)
        holders += processes_read.get("holders") or []
    # The names first: the node's failure annotation keeps the first 600 characters.
    return _result(not holders, holders, (
        "%d still hold a GPU after driver_upgrade_holders_timeout (%s s), so the driver was not changed: %s. %s. %s"
        % (len(holders), timeout, ", ".join(h.get("name", "") for h in holders),
           "; ".join(h.get("text", "") for h in holders), AGAIN)))


def bare_pods(left, timeout, policy):
    """No bare pod left on the node, or the policy deletes them. left: drain_plan's `bare`."""
    left = _objects(left, "the bare pods")
    names = ", ".join("%s/%s" % (p.get("namespace"), p.get("name")) for p in left)
    return _result(not left or policy == "delete", left, (
        "%d bare pod(s) still on the node after driver_upgrade_bare_pods_timeout (%s s), so it was not drained and its "
        "driver was not changed: %s. The drain cannot evict a pod no controller manages. Let them finish or delete them "
        "(kubectl delete pod -n NAMESPACE NAME), or set driver_upgrade_bare_pods=delete to have the rollout delete "
        "them. %s %s." % (len(left), timeout, names, AGAIN, "; ".join(p.get("text", "") for p in left))),
        done=not left)


def node_ready(nodes, node_name, branch, label, timeout):
    """The Node Ready and, where a driver label is read, reporting the branch."""
    nodes = _objects(nodes, "the Node")
    node = nodes[0] if nodes else None
    head = "After driver_upgrade_ready_timeout (%s s) the Node %s " % (timeout, node_name)
    if node is None:
        return _result(False, [], head + "is gone from the API server. The node stays cordoned")
    ready = _ready_condition(node)
    found = str(_meta(node, "labels").get(label, "")) if label else ""
    row = {"ready": ready.get("status", ""), "reason": ready.get("reason", ""), "label": found}
    if ready.get("status") != "True":
        return _result(False, [row], head + "is not Ready (%s: %s). The node stays cordoned" % (
            ready.get("reason") or "no Ready condition", ready.get("message") or ""))
    if label and found != str(branch):
        message = head + ("is Ready but its label %s says %s, not %s (is GPU Feature Discovery running on it?). "
                          "The node stays cordoned" % (label, found or "nothing", branch))
        return _result(False, [row], message)
    return _result(True, [row], head + "is Ready on branch %s" % branch)


def agent_condition(nodes, condition, timeout):
    """The Node's condition the fractioning agents set is True."""
    nodes = _objects(nodes, "the Node")
    found = {}
    for entry in ((nodes[0].get("status") or {}).get("conditions") or []) if nodes else []:
        if entry.get("type") == condition:
            found = entry
    return _result(found.get("status") == "True", [found] if found else [], (
        "The Node's condition %s is %s (%s: %s) after driver_upgrade_agent_timeout (%s s): the fractioning agents are "
        "not ready on it. It stays cordoned" % (condition, found.get("status") or "gone", found.get("reason") or "no reason",
                                                found.get("message") or "", timeout)))


CHECKS = {"agents_back": agents_back, "agents_left": agents_left, "mps_clients": mps_clients,
          "gpu_holders": gpu_holders, "bare_pods": bare_pods, "node_ready": node_ready,
          "agent_condition": agent_condition}


def _objects(value, what):
    if not isinstance(value, list):
        raise RolloutError("%s must be a list, got %s" % (what, type(value).__name__))
    return value


def _count(value, what):
    try:
        return int(value)
    except (TypeError, ValueError):
        raise RolloutError("%s must be a count, got %r" % (what, value))


# -------------------------------------------------------------------- a failed node's labels
def failure_reason(task, result, reboot_timeout=None):
    """Why a node failed, for its annotation, Event and report: the failed task's name and,
    where it printed them, its last error lines (apt and dpkg name the package), else its
    message. A reboot the node never came back from says what to do."""
    result = result if isinstance(result, dict) else {}
    name = str(task or "a step")
    lines = [str(line) for key in ("stderr_lines", "stdout_lines") for line in result.get(key) or []]
    errors = []
    for line in lines:
        if re.search(r"(?i)error", line) and not line.startswith("E: Sub-process") and line not in errors:
            errors.append(line)
    detail = " ".join(errors[-3:]) if errors else str(result.get("msg") or "failed")
    if result.get("rebooted") and str(result.get("msg") or "").startswith("Timed out"):
        within = " within nvidia_driver_reboot_timeout (%s s)" % reboot_timeout if reboot_timeout else ""
        detail = ("the node went down for its reboot and did not come back%s (%s). Its new driver is installed: "
                  "bring the machine back (console, BMC or cloud API), then run the rollout again: it resumes this "
                  "node, checks the loaded driver and uncordons it" % (within, detail))
    reason = " ".join(("%s: %s" % (name, detail)).split())
    return reason if len(reason) <= 600 else reason[:597] + "..."


def failed_labels(node):
    """The labels a failed node gets: the rollout's upgrade-failed, and the GPU Operator's too
    where its agents had left (its label already in a state that sends them off): before
    that, the pods the drain left (a stopped bare fraction) keep their MPS."""
    state = _meta(node or {}, "labels").get(STATE_LABEL, "")
    labels = {ROLLOUT_LABEL: FAILED}
    if state in AGENTS_OFF + [FAILED]:
        labels[STATE_LABEL] = FAILED
    return labels


# -------------------------------------------------------------------- the report
UNFINISHED = ("not started", FAILED, "blocked", "unreachable")
TABLE = "%-22s %-12s %-12s %-15s %-20s %8s %8s  %s"
ROW = "%-22s %-12s %-12s %-15s %-20s %8.1f %8.1f  %s"


def _utc(seconds):
    return datetime.datetime.fromtimestamp(float(seconds), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def report(rollout, outcomes, selves, branch, started, now):
    """The rollout's rows, one per planned node (the plan's order, then the nodes it skipped).
    outcomes: each node's {state, driver, reason, since, seconds, waited} ({} when it has not
    started) and selves: each node's {driver_version} (its driver before), in that order;
    started, now: epoch seconds."""
    hosts = list(rollout.get("order") or []) + list(rollout.get("skipped") or [])
    if not isinstance(outcomes, list) or not isinstance(selves, list) or not len(outcomes) == len(selves) == len(hosts):
        raise RolloutError("report: expects one outcome and one node record per planned node (%d)" % len(hosts))
    rows = []
    for host, outcome, mine in zip(hosts, outcomes, selves):
        view = (rollout.get("nodes") or {}).get(host) or {}
        outcome, old = outcome or {}, (mine or {}).get("driver_version") or ""
        if view.get("action") == "skip":
            row = {"new_driver": old, "state": "unreachable" if view.get("unreachable") else "skipped",
                   "since": view.get("not_ready_since") or _utc(started), "seconds": 0, "waited": 0,
                   "note": view.get("reason", "")}
        elif outcome:
            row = {"new_driver": outcome.get("driver", ""), "state": outcome.get("state", ""),
                   "since": _utc(outcome.get("since") or started),
                   "seconds": round(float(outcome.get("seconds") or 0), 1),
                   "waited": round(float(outcome.get("waited") or 0), 1), "note": outcome.get("reason", "")}
        else:
            row = {"new_driver": "", "state": "not started", "since": _utc(started), "seconds": 0, "waited": 0,
                   "note": view.get("reason", "")}
        rows.append(dict({"node": host, "old_driver": old}, **row))
    return {"branch": int(branch), "batches": rollout.get("batches") or [],
            "max_unavailable": rollout.get("max_unavailable"),
            "wall_seconds": round(float(now) - float(started), 1),
            "finished": not [r for r in rows if r["state"] in UNFINISHED], "nodes": rows}


def report_lines(rollout_report):
    """The report as the table the play shows."""
    out = [TABLE % ("node", "old driver", "new driver", "state", "since", "spent s", "waited s", "note")]
    for row in rollout_report.get("nodes") or []:
        out.append(ROW % (row["node"], row["old_driver"], row["new_driver"], row["state"], row["since"],
                          float(row["seconds"]), float(row["waited"]), row["note"]))
    out.append("rollout to branch %s: %.1f s wall, batches %s" % (
        rollout_report.get("branch"), float(rollout_report.get("wall_seconds") or 0),
        ", ".join(str(b) for b in rollout_report.get("batches") or [])))
    return out


def plan_lines(rollout, branch):
    """The plan as the play shows it before anything changes."""
    out = ["Upgrade to branch %s: %d node(s) in batches %s (at most %s unavailable; unavailable now: %s)" % (
        branch, len(rollout.get("order") or []), ", ".join(str(b) for b in rollout.get("batches") or []) or "none",
        rollout.get("max_unavailable"), ", ".join(rollout.get("unavailable") or []) or "none")]
    for host in list(rollout.get("order") or []) + list(rollout.get("skipped") or []):
        view = rollout["nodes"][host]
        out.append("%s: %s (%s)" % (host, view.get("action"), view.get("reason")))
    return out
