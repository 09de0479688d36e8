# -*- coding: utf-8 -*-
# Apache-2.0
"""The fleet driver upgrade's filters (documentation: the driver_upgrade_*.yml files
beside this one). Each is a thin door to module_utils/driver_upgrade.py (the rollout's
rules), drain.py or gpu_holders.py, where the unit tests call the rules alone."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import inspect

from ansible.errors import AnsibleFilterError

from ansible_collections.smshare.kai.plugins.module_utils import drain, gpu_holders
from ansible_collections.smshare.kai.plugins.module_utils import driver_upgrade as rules


def _rule(func, *args):
    try:
        return func(*args)
    except rules.RolloutError as exc:
        raise AnsibleFilterError(str(exc))


def driver_upgrade_node(node, host, loaded_branch, branch):
    """One node's view (where its upgrade resumes, the states still ahead of it, whether it was
    unschedulable before)."""
    if not node:
        raise AnsibleFilterError("driver_upgrade_node: no Kubernetes Node for %s. Nothing was changed." % host)
    return _rule(rules.node_view, host, node, loaded_branch, int(branch))


def driver_upgrade_plan(fleet, nodes, branch, serial=1, max_unavailable="25%"):
    """The rollout plan (module_utils/driver_upgrade.py plan())."""
    return _rule(rules.plan, fleet, nodes, branch, serial, max_unavailable)


def driver_upgrade_room(nodes, plan, batch, pings=None):
    """Which nodes of a batch may not start, the fleet read again as the batch begins."""
    return _rule(rules.room, nodes, plan, batch, pings)


def driver_upgrade_check(value, check, *args):
    """One of the rollout's wait checks, {ok, done, rows, message}: agents_back, agents_left,
    mps_clients, gpu_holders, bare_pods, node_ready, agent_condition."""
    if check not in rules.CHECKS:
        raise AnsibleFilterError("driver_upgrade_check: no check %r (one of %s)" % (check, ", ".join(sorted(rules.CHECKS))))
    try:
        inspect.signature(rules.CHECKS[check]).bind(value, *args)
    except TypeError as exc:   # the wrong number of arguments for the check
        raise AnsibleFilterError("driver_upgrade_check %s: %s" % (check, exc))
    try:
        return rules.CHECKS[check](value, *args)
    except rules.RolloutError as exc:
        raise AnsibleFilterError("driver_upgrade_check %s: %s" % (check, exc))


def driver_upgrade_failure_reason(task, result, reboot_timeout=None):
    """Why a node failed, from the failed task's name and result (one line, at most 600 characters)."""
    return rules.failure_reason(task, result, reboot_timeout)


def driver_upgrade_failed_labels(node):
    """The labels a failed node keeps (the GPU Operator's only where the agents had left)."""
    if not isinstance(node, dict):
        raise AnsibleFilterError("driver_upgrade_failed_labels: expects a Node object, got %s" % type(node).__name__)
    return rules.failed_labels(node)


def driver_upgrade_report(plan, outcomes, selves, branch, started, now):
    """The rollout's report: one row per planned node, whether it finished."""
    if not isinstance(plan, dict):
        raise AnsibleFilterError("driver_upgrade_report: expects the plan (a mapping)")
    return _rule(rules.report, plan, outcomes, selves, branch, started, now)


def driver_upgrade_table(value, kind, branch=None):
    """The plan (kind plan, with the branch) or the report (kind report) as the lines the play shows."""
    if not isinstance(value, dict) or kind not in ("plan", "report"):
        raise AnsibleFilterError("driver_upgrade_table: expects the plan or the report (a mapping) and 'plan' or 'report'")
    return rules.plan_lines(value, branch) if kind == "plan" else rules.report_lines(value)


def driver_upgrade_operator_conflicts(policies, nodes, node_names):
    """The GPU Operator ClusterPolicies that manage the driver on the rollout's nodes."""
    return _rule(rules.operator_conflicts, policies, nodes, node_names)


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


def driver_upgrade_drain_refusal(drained, blocks, node_name, timeout):
    """Why the drain of node_name did not go through, '' when it did (module_utils/drain.py)."""
    if not isinstance(drained, dict):
        raise AnsibleFilterError("driver_upgrade_drain_refusal: expects k8s_drain's result (a mapping), got %s"
                                 % type(drained).__name__)
    if not isinstance(blocks, list):
        raise AnsibleFilterError("driver_upgrade_drain_refusal: expects the blocks of smshare.kai.disruption_budgets_info"
                                 " (a list), got %s" % type(blocks).__name__)
    return drain.drain_refusal(drained, blocks, str(node_name), timeout)


class FilterModule(object):
    def filters(self):
        return {"driver_upgrade_plan": driver_upgrade_plan, "driver_upgrade_node": driver_upgrade_node,
                "driver_upgrade_room": driver_upgrade_room, "driver_upgrade_check": driver_upgrade_check,
                "driver_upgrade_failed_labels": driver_upgrade_failed_labels,
                "driver_upgrade_failure_reason": driver_upgrade_failure_reason,
                "driver_upgrade_report": driver_upgrade_report, "driver_upgrade_table": driver_upgrade_table,
                "driver_upgrade_mps_holders": driver_upgrade_mps_holders,
                "driver_upgrade_drain_plan": driver_upgrade_drain_plan,
                "driver_upgrade_drain_refusal": driver_upgrade_drain_refusal,
                "driver_upgrade_operator_conflicts": driver_upgrade_operator_conflicts}
