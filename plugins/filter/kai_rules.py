# -*- coding: utf-8 -*-
# Apache-2.0
"""Filters on KAI's rules (documentation: workload_lint.yml, queue_plan.yml and
gpu_capacity.yml beside this file). The engine is module_utils/workload_rules.py and
module_utils/queue_tree.py, shared with the module smshare.kai.workload_lint
and the role smshare.kai.queues."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.smshare.kai.plugins.module_utils import gpu_capacity as _gpu_capacity
from ansible_collections.smshare.kai.plugins.module_utils import queue_tree
from ansible_collections.smshare.kai.plugins.module_utils import workload_rules
from ansible_collections.smshare.kai.plugins.module_utils.plain import plain as _plain


def workload_lint(objects, queues=None, sharing_mode=None):
    """Findings (dicts with rule, severity, object, field, message, text) for Kubernetes objects."""
    if isinstance(objects, dict):
        objects = [objects]
    if not isinstance(objects, list):
        raise AnsibleFilterError("workload_lint: expects a Kubernetes object or a list of them, got %s"
                                 % type(objects).__name__)
    try:
        findings = workload_rules.lint(_plain(objects), _plain(queues) if queues is not None else None,
                                       sharing_mode=sharing_mode)
    except ValueError as exc:
        raise AnsibleFilterError("workload_lint: %s" % exc)
    return [f.as_dict() for f in findings]


def queue_plan(queues, live=None, prune=False, workload_queues=None, pods=None, cluster_unread=False):
    """The queues role's plan: objects to apply (parents first), queues to prune
    (children first), adopted queues, errors and warnings of the whole tree."""
    prune = _boolean("prune", prune)
    live = _plain(live if live is not None else [])
    if not isinstance(live, list):
        raise AnsibleFilterError("queue_plan: live must be the list of Queue objects the cluster returned (a k8s_info "
                                 "task's .resources), got %s" % type(live).__name__)
    return queue_tree.plan(_plain(queues), live=live, prune=prune,
                           workload_queues=_plain(workload_queues or []), pods=_plain(pods or []),
                           cluster_unread=_boolean("cluster_unread", cluster_unread))


def _boolean(name, value):
    """A boolean, or what -e key=value gives (true/false, yes/no, on/off, 1/0), as Ansible reads it."""
    try:
        return boolean(value, strict=True)
    except TypeError:
        raise AnsibleFilterError("queue_plan: %s=%r must be a boolean (true or false)" % (name, value))


def queues_interrupted(failed, names, action="apply"):
    """What a failed apply or prune loop of the queues role left, as one message.
    failed: ansible_failed_result (a loop's, with its results) or its results."""
    if action not in ("apply", "prune"):
        raise AnsibleFilterError("queues_interrupted: action must be apply or prune, got %r" % (action,))
    failed = _plain(failed or [])
    reason = None
    if isinstance(failed, dict):
        reason = None if "results" in failed else failed.get("msg")
        failed = failed.get("results") or []
    return queue_tree.interrupted(failed, [str(n) for n in _plain(names or [])], action, reason=reason)


def gpu_capacity(nodes, pods=None, selector=None):
    """Whole GPUs of the Ready, schedulable nodes matching `selector`, and how many pods take."""
    return _gpu_capacity.capacity(_plain(nodes), _plain(pods or []), _plain(selector or {}))


class FilterModule(object):
    def filters(self):
        return {"workload_lint": workload_lint, "queue_plan": queue_plan, "queues_interrupted": queues_interrupted,
                "gpu_capacity": gpu_capacity}
