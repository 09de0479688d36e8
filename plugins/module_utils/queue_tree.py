# -*- coding: utf-8 -*-
# Apache-2.0
"""KAI queues (scheduling.run.ai/v2 Queue) as inventory data, and the checks
of the whole tree. Pure Python: the `queues` role (through the filters
smshare.kai.queue_plan and queue_objects) and the workload lint use it.

Inventory form of one queue (every key but `name` optional):

    name: ml-team
    display_name: ML Team
    parent: research
    priority: 200
    resources:
      gpu: {quota: 1, limit: 2, over_quota_weight: 1}
      cpu: {quota: 8000}        # millicores
      memory: {quota: 32000}    # MB (10^6 bytes)

KAI reads an unset quota, limit or overQuotaWeight as 0, and a limit of 0
means nothing of that resource may be allocated. The inventory form fills
what is left out with the values of the chart's own default queues instead
(quota 0, limit -1, overQuotaWeight 1), and the Queue objects always carry
all nine numbers, so what the cluster holds never depends on a default.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import re

from ansible.module_utils.six import string_types

from ansible_collections.smshare.kai.plugins.module_utils.plain import one_line

API_VERSION = "scheduling.run.ai/v2"
KIND = "Queue"
MANAGED_BY = ("app.kubernetes.io/managed-by", "smshare.kai")
QUEUE_LABEL = "kai.scheduler/queue"

RESOURCES = ("cpu", "gpu", "memory")
UNITS = {
    "cpu": "millicores (1000 = one CPU)",
    "gpu": "GPU devices (fractions allowed: 0.5 = half a GPU)",
    "memory": "megabytes (MB, 10^6 bytes)",
}
SHORT_UNITS = {"cpu": "millicores", "gpu": "GPUs", "memory": "MB"}
# inventory key -> Queue spec key
FIELDS = (("quota", "quota"), ("limit", "limit"), ("over_quota_weight", "overQuotaWeight"))
DEFAULTS = {"quota": 0, "limit": -1, "over_quota_weight": 1}
QUEUE_KEYS = ("name", "display_name", "parent", "priority", "resources")
NAME_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
NUMBER_RE = re.compile(r"-?[0-9]+(\.[0-9]+)?")
UNLIMITED = -1
# A label value's longest (pods name their queue in kai.scheduler/queue).
LABEL_MAX = 63
# Queue spec.priority is a 32-bit integer.
PRIORITY_MIN, PRIORITY_MAX = -2 ** 31, 2 ** 31 - 1
EPSILON = 1e-9

ERROR = "error"
WARNING = "warning"


class Problem:
    """One finding about the tree: severity, the queue, the rule and a message."""

    def __init__(self, severity, queue, rule, message):
        self.severity = severity
        self.queue = queue
        self.rule = rule
        self.message = message

    def __str__(self):
        return "queue %s: %s" % (self.queue, self.message) if self.queue else self.message

    def as_dict(self):
        return {"severity": self.severity, "queue": self.queue, "rule": self.rule,
                "message": str(self)}

    def __repr__(self):
        return "Problem(%r, %r, %r, %r)" % (self.severity, self.queue, self.rule, self.message)


class Queue:
    """A queue of the tree: what it is called, where it hangs, what it gets."""

    def __init__(self, name, parent=None, display_name=None, priority=None, resources=None,
                 managed=True, explicit=None):
        self.name = name
        self.parent = parent or None
        self.display_name = display_name
        self.priority = priority
        # resource -> {quota, limit, over_quota_weight}
        self.resources = resources or dict((r, dict(DEFAULTS)) for r in RESOURCES)
        self.managed = managed
        # (resource, field) pairs the inventory or the object set explicitly
        self.explicit = explicit if explicit is not None else set()

    def to_object(self):
        """The scheduling.run.ai/v2 Queue object, every number explicit."""
        spec = {}
        if self.display_name:
            spec["displayName"] = self.display_name
        if self.parent:
            spec["parentQueue"] = self.parent
        if self.priority is not None:
            spec["priority"] = self.priority
        spec["resources"] = dict(
            (resource, dict((key, _plain(self.resources[resource][field])) for field, key in FIELDS))
            for resource in RESOURCES)
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": self.name, "labels": {MANAGED_BY[0]: MANAGED_BY[1]}},
            "spec": spec,
        }


def _plain(number):
    """4.0 -> 4, so the objects we send and the ones the API returns compare equal."""
    if isinstance(number, float) and number.is_integer():
        return int(number)
    return number


def show(value):
    return repr(value) if isinstance(value, string_types) else str(value)


# ---------------------------------------------------------------- inventory form
def _number(value):
    """A JSON number, or a plain decimal string; None when it is neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value if math.isfinite(value) else None
    if isinstance(value, string_types) and NUMBER_RE.fullmatch(value.strip()):
        text = value.strip()
        return float(text) if "." in text else int(text)
    return None


def _check_amount(label, resource, field, value, problems):
    """One quota/limit/over_quota_weight value; returns the number or None."""
    number = _number(value)
    unit = UNITS[resource]
    if number is None:
        problems.append(Problem(ERROR, label, "resource_value",
                                "resources.%s.%s=%s: must be a number in %s; for example %s" % (
                                    resource, field, show(value), unit,
                                    {"cpu": "2000", "gpu": "0.5", "memory": "32000"}[resource])))
        return None
    if field == "over_quota_weight":
        if number < 0:
            problems.append(Problem(ERROR, label, "resource_value",
                                    "resources.%s.over_quota_weight=%s: must be 0 or more" % (resource, show(value))))
            return None
        return number
    if number < 0 and number != UNLIMITED:
        problems.append(Problem(ERROR, label, "resource_value",
                                "resources.%s.%s=%s: must be -1 (%s) or 0 or more, in %s" % (
                                    resource, field, show(value),
                                    "unlimited" if field == "quota" else "no limit", unit)))
        return None
    if resource in ("cpu", "memory") and not float(number).is_integer():
        problems.append(Problem(ERROR, label, "resource_value",
                                "resources.%s.%s=%s: must be a whole number of %s" % (
                                    resource, field, show(value), unit)))
        return None
    return number


def from_inventory(items):
    """Inventory list -> ([Queue], [Problem]): every shape error, not just the first."""
    problems = []
    queues = []
    if not isinstance(items, list):
        return [], [Problem(ERROR, None, "shape", "the queue list must be a list of queues, got %s" % (
            type(items).__name__))]
    seen = set()
    for index, item in enumerate(items):
        label = "#%d" % (index + 1)
        if not isinstance(item, dict):
            problems.append(Problem(ERROR, label, "shape", "must be a mapping with at least `name`, got %s" % (
                show(item))))
            continue
        name = item.get("name")
        if not isinstance(name, string_types) or not NAME_RE.fullmatch(name) or len(name) > LABEL_MAX:
            problems.append(Problem(ERROR, label, "name",
                                    "name=%s: must be a Kubernetes object name (lowercase letters, digits, "
                                    "'-' and '.', starting and ending with a letter or digit) of at most %d "
                                    "characters, the longest value the kai.scheduler/queue label of a pod can "
                                    "carry; for example ml-team" % (show(name), LABEL_MAX)))
            continue
        label = name
        if name in seen:
            problems.append(Problem(ERROR, name, "duplicate", "is declared more than once"))
            continue
        seen.add(name)
        before = len(problems)
        unknown = sorted(set(item) - set(QUEUE_KEYS))
        if unknown:
            problems.append(Problem(ERROR, label, "shape", "unknown key%s %s; a queue takes %s" % (
                "s" if len(unknown) > 1 else "", ", ".join(unknown), ", ".join(QUEUE_KEYS))))
        parent = item.get("parent")
        if parent is not None and (not isinstance(parent, string_types) or not NAME_RE.fullmatch(parent)):
            problems.append(Problem(ERROR, label, "shape", "parent=%s: must name a queue" % show(parent)))
        display_name = item.get("display_name")
        if display_name is not None and (not isinstance(display_name, string_types)
                                         or re.search(u"[\x00-\x1f\x7f]", display_name)):
            problems.append(Problem(ERROR, label, "shape",
                                    "display_name=%s: must be text on one line" % show(display_name)))
        priority = item.get("priority")
        if priority is not None:
            number = _number(priority)
            if number is None or not float(number).is_integer() or not PRIORITY_MIN <= number <= PRIORITY_MAX:
                problems.append(Problem(ERROR, label, "shape",
                                        "priority=%s: must be a whole number from %d to %d (higher goes first; "
                                        "KAI's default is 100)" % (show(priority), PRIORITY_MIN, PRIORITY_MAX)))
            else:
                priority = int(number)
        resources, explicit = _resources_from_inventory(label, item.get("resources"), problems)
        if len(problems) == before:
            queues.append(Queue(name, parent=parent, display_name=display_name, priority=priority,
                                resources=resources, managed=True, explicit=explicit))
    return queues, problems


def _resources_from_inventory(label, given, problems):
    resources = dict((r, dict(DEFAULTS)) for r in RESOURCES)
    explicit = set()
    if given is None:
        return resources, explicit
    if not isinstance(given, dict):
        problems.append(Problem(ERROR, label, "shape", "resources must be a mapping of cpu, gpu and memory"))
        return resources, explicit
    for resource in sorted(given):
        if resource not in RESOURCES:
            problems.append(Problem(ERROR, label, "shape", "resources.%s: unknown resource; KAI queues take %s" % (
                resource, ", ".join(RESOURCES))))
            continue
        fields = given[resource]
        if fields is None:
            continue
        if not isinstance(fields, dict):
            problems.append(Problem(ERROR, label, "shape",
                                    "resources.%s must be a mapping of quota, limit and over_quota_weight" % resource))
            continue
        for field in sorted(fields):
            if field not in DEFAULTS:
                problems.append(Problem(ERROR, label, "shape",
                                        "resources.%s.%s: unknown key; a resource takes quota, limit and "
                                        "over_quota_weight" % (resource, field)))
                continue
            number = _check_amount(label, resource, field, fields[field], problems)
            if number is not None:
                resources[resource][field] = number
                explicit.add((resource, field))
    return resources, explicit


# ---------------------------------------------------------------- live objects
def from_object(obj):
    """A Queue object read from the cluster (KAI's meaning: unset numbers are 0)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    given = spec.get("resources") or {}
    resources = {}
    explicit = set()
    for resource in RESOURCES:
        values = given.get(resource) or {}
        resources[resource] = {}
        for field, key in FIELDS:
            number = _number(values.get(key))
            resources[resource][field] = 0 if number is None else number
            if key in values:
                explicit.add((resource, field))
    labels = meta.get("labels") or {}
    return Queue(meta.get("name"), parent=spec.get("parentQueue"), display_name=spec.get("displayName"),
                 priority=spec.get("priority"), resources=resources,
                 managed=labels.get(MANAGED_BY[0]) == MANAGED_BY[1], explicit=explicit)


def names_and_parents(items):
    """{name: parent} from either form (inventory items or Queue objects), leniently:
    what the workload lint needs to know which queues exist and which are leaves."""
    tree = {}
    for item in items or []:
        if not isinstance(item, dict):
            continue
        if "metadata" in item or item.get("kind") == KIND:
            name = (item.get("metadata") or {}).get("name")
            parent = (item.get("spec") or {}).get("parentQueue")
        else:
            name, parent = item.get("name"), item.get("parent")
        if isinstance(name, string_types) and name:
            tree[name] = parent or None
    return tree


def children_of(tree):
    children = dict((name, []) for name in tree)
    for name, parent in tree.items():
        if parent in children:
            children[parent].append(name)
    return dict((name, sorted(kids)) for name, kids in children.items())


# ---------------------------------------------------------------- the checks
def _fmt(number):
    number = _plain(number)
    return "%g" % number if isinstance(number, float) else str(number)


def check_tree(queues, workload_queues=None, pruned=(), parents_unknown=False):
    """Every problem of the tree `queues` (a list of Queue), in a stable order.

    workload_queues: {queue name: [who names it, ...]}; each must exist and be
    a leaf. pruned: names about to be deleted (a parent among them is missing).
    parents_unknown: the cluster was not read, so a parent that is not
    declared may exist there (not a problem yet).
    Problems of queues this inventory does not manage are warnings: the role
    reports them but cannot fix them.
    """
    problems = []
    by_name = dict((q.name, q) for q in queues)
    tree = dict((q.name, q.parent) for q in queues)
    children = children_of(tree)

    def add(severity, queue, rule, message, involved=()):
        """An error only this inventory's queues can cause stays an error; one
        among queues it does not manage is reported as a warning."""
        names = [queue] + list(involved)
        if severity == ERROR and not any(by_name[n].managed for n in names if n in by_name):
            severity = WARNING
            message += " (no queue of this inventory is involved)"
        problems.append(Problem(severity, queue, rule, message))

    for queue in sorted(queues, key=lambda q: q.name):
        if queue.parent and queue.parent not in by_name:
            if queue.parent in pruned:
                problems.append(Problem(
                    ERROR, queue.name, "parent_missing",
                    "parent %r would be pruned (it is not in the inventory) but this queue still names it; "
                    "declare %r or move this queue" % (queue.parent, queue.parent)))
            elif not parents_unknown:
                add(ERROR, queue.name, "parent_missing",
                    "parent %r does not exist: it is neither declared nor in the cluster" % queue.parent)
    problems.extend(_cycles(tree, by_name))
    for queue in sorted(queues, key=lambda q: q.name):
        _check_amounts(queue, add)
    for parent in sorted(children):
        if children[parent] and parent in by_name:
            _check_children(by_name[parent], [by_name[c] for c in children[parent]], add)
    for name in sorted(workload_queues or {}):
        who = ", ".join(sorted(workload_queues[name])[:3])
        more = len(workload_queues[name]) - 3
        if more > 0:
            who += " and %d more" % more
        if name not in by_name:
            ours = name in pruned or "the inventory" in workload_queues[name]
            problems.append(Problem(
                ERROR if ours else WARNING, name, "workload_queue_missing",
                "workloads name this queue (%s) but it %s" % (
                    who, "would be pruned" if name in pruned else "does not exist")))
        elif children.get(name):
            add(ERROR, name, "workload_queue_not_leaf",
                "workloads name this queue (%s) but it has child queues (%s): only leaf queues run jobs, "
                "so its workloads would never be scheduled; submit them to a leaf queue or remove the children"
                % (who, ", ".join(children[name])), involved=children[name])
    return problems


def _cycles(tree, by_name):
    problems = []
    state = {}  # name -> 1 visiting, 2 done
    reported = set()
    for start in sorted(tree):
        path = []
        node = start
        while node in tree and state.get(node) is None:
            state[node] = 1
            path.append(node)
            node = tree[node]
        if node in tree and state.get(node) == 1:
            cycle = path[path.index(node):]
            key = frozenset(cycle)
            if key not in reported:
                reported.add(key)
                first = min(cycle)
                rotated = cycle[cycle.index(first):] + cycle[:cycle.index(first)]
                message = ("is its own parent" if len(cycle) == 1 else
                           "parentQueue forms a cycle: %s" % " -> ".join(rotated + [first]))
                severity = ERROR if any(by_name[n].managed for n in cycle) else WARNING
                problems.append(Problem(severity, first, "cycle", message))
        for name in path:
            state[name] = 2
    return problems


def _check_amounts(queue, add):
    for resource in RESOURCES:
        values = queue.resources[resource]
        quota, limit = values["quota"], values["limit"]
        if quota == UNLIMITED and limit != UNLIMITED:
            add(ERROR, queue.name, "limit_below_quota",
                "resources.%s: limit %s is below the quota -1 (unlimited); set limit -1 or a finite quota"
                % (resource, _fmt(limit)))
        elif limit != UNLIMITED and quota != UNLIMITED and limit + EPSILON < quota:
            unset = "" if (resource, "limit") in queue.explicit else " (unset, which KAI reads as 0)"
            add(ERROR, queue.name, "limit_below_quota",
                "resources.%s: limit %s%s is below the quota %s (%s); the limit is a hard cap: "
                "set it to at least %s, or -1 for no limit" % (
                    resource, _fmt(limit), unset, _fmt(quota), SHORT_UNITS[resource], _fmt(quota)))
        if quota == UNLIMITED:
            add(WARNING, queue.name, "unlimited_quota",
                "resources.%s: quota -1 means UNLIMITED (the queue is guaranteed every %s in the cluster "
                "and reclaims it from the others); 0 means no guarantee: did you mean 0?" % (
                    resource, resource.upper() if resource != "memory" else "MB of memory"))
        if limit == 0 and quota == 0 and (resource, "limit") in queue.explicit:
            add(WARNING, queue.name, "zero_limit",
                "resources.%s: limit 0 means nothing may be allocated: pods that request %s never run "
                "in this queue; -1 means no limit" % (resource, resource))


def _check_children(parent, kids, add):
    for resource in RESOURCES:
        ceiling = parent.resources[resource]["quota"]
        if ceiling == UNLIMITED:
            continue
        unlimited = [k.name for k in kids if k.resources[resource]["quota"] == UNLIMITED]
        if unlimited:
            add(ERROR, parent.name, "children_over_quota",
                "resources.%s: child queue%s %s ha%s an unlimited quota (-1) but this parent's quota is %s"
                % (resource, "s" if len(unlimited) > 1 else "", ", ".join(unlimited),
                   "ve" if len(unlimited) > 1 else "s", _fmt(ceiling)), involved=[k.name for k in kids])
            continue
        total = sum(k.resources[resource]["quota"] for k in kids)
        if total > ceiling + EPSILON:
            parts = ", ".join("%s %s" % (k.name, _fmt(k.resources[resource]["quota"]))
                              for k in kids if k.resources[resource]["quota"])
            add(ERROR, parent.name, "children_over_quota",
                "resources.%s: the child queues' quotas add up to %s (%s), more than this parent's quota %s "
                "(%s): the parent cannot guarantee them" % (
                    resource, _fmt(total), parts, _fmt(ceiling), SHORT_UNITS[resource]),
                involved=[k.name for k in kids])


# ---------------------------------------------------------------- the plan
def workload_queue_sources(inventory_names=(), pods=()):
    """{queue: [who names it]} from the inventory's list and live pods."""
    found = {}
    for name in inventory_names or []:
        found.setdefault(name, []).append("the inventory")
    for pod in pods or []:
        meta = pod.get("metadata") or {}
        name = (meta.get("labels") or {}).get(QUEUE_LABEL)
        phase = (pod.get("status") or {}).get("phase")
        if name and phase not in ("Succeeded", "Failed"):
            found.setdefault(name, []).append("pod %s/%s" % (meta.get("namespace"), meta.get("name")))
    return found


def parents_first(queues):
    """Creation order: a parent before its children (the admission webhook reads the parent)."""
    by_name = dict((q.name, q) for q in queues)
    ordered, placed = [], set()

    def place(queue, trail):
        if queue.name in placed or queue.name in trail:
            return
        if queue.parent in by_name:
            place(by_name[queue.parent], trail | {queue.name})
        placed.add(queue.name)
        ordered.append(queue)
    for queue in sorted(queues, key=lambda q: q.name):
        place(queue, frozenset())
    return ordered


def plan(items, live=(), prune=False, workload_queues=(), pods=(), cluster_unread=False):
    """What the queues role does: the tree after the change, checked whole.

    items: the inventory list; live: Queue objects in the cluster; prune:
    delete the managed queues the inventory no longer declares; cluster_unread:
    live is not known yet (the inventory's own tree is checked: a parent it does
    not declare may be in the cluster). Returns
    {"objects": [...parents first], "prune": [...children first], "adopt": [...],
     "errors": [...], "warnings": [...], "tree": {name: parent},
     "tree_text": ["ml-team (in research)", "research"]}.
    """
    declared, problems = from_inventory(items)
    live_queues = [from_object(o) for o in live or [] if isinstance(o, dict)]
    declared_names = set(q.name for q in declared)
    pruned = set()
    result_tree = list(declared)
    for queue in live_queues:
        if queue.name in declared_names:
            continue
        if queue.managed and prune:
            pruned.add(queue.name)
            continue
        result_tree.append(queue)
    adopt = sorted(q.name for q in live_queues if q.name in declared_names and not q.managed)
    if not [p for p in problems if p.severity == ERROR]:
        problems.extend(check_tree(result_tree, workload_queue_sources(workload_queues, pods), pruned,
                                   parents_unknown=cluster_unread))
    by_name = dict((q.name, q) for q in live_queues)
    doomed = [by_name[name] for name in pruned]
    return {
        "objects": [q.to_object() for q in parents_first(declared)],
        "prune": [q.name for q in reversed(parents_first(doomed))],
        "adopt": adopt,
        "errors": [str(p) for p in problems if p.severity == ERROR],
        "warnings": [str(p) for p in problems if p.severity == WARNING],
        "tree": dict((q.name, q.parent) for q in result_tree),
        "tree_text": ["%s (in %s)" % (q.name, q.parent) if q.parent else q.name
                      for q in sorted(result_tree, key=lambda q: q.name)],
    }


def interrupted(results, names, action, reason=None):
    """The message for an apply (parents first) or prune (children first) loop that
    failed part way. results: the loop's per-item results, in the order of names.
    Each queue is one object written whole, so what is left is the queues before
    the first failure: a consistent tree the next run completes. reason: why,
    when the failure was not one of the loop's items."""
    action = "applied" if action == "apply" else "pruned"
    results = list(results or [])
    done = [n for n, r in zip(names, results) if isinstance(r, dict) and not r.get("failed")]
    failed = [(n, r) for n, r in zip(names, results) if not isinstance(r, dict) or r.get("failed")]
    left = [n for n in names if n not in done]
    if failed:
        first, result = failed[0]
        why = "queue %s: %s" % (first, one_line(result.get("msg") if isinstance(result, dict) else result, 400))
    else:
        why = "the run stopped before every queue was %s%s" % (action, ": " + one_line(reason, 400) if reason else "")
    order = "parents first" if action == "applied" else "children first"
    lost = ""
    if failed and len(failed) == len(left) and len(left) > 1:
        lost = " Every queue after %s failed too: the API server probably stopped answering (check it with " \
               "`kubectl get --raw /readyz`)." % first
    return ("The queues were not all %s. %s.%s %s (%s, so the cluster's tree stays consistent): %s. Not %s: %s. "
            "Fix the cause and run the role again: it %s only what is still missing." % (
                action, why, lost, action.capitalize(), order, ", ".join(done) or "none", action,
                ", ".join(left) or "none", "applies" if action == "applied" else "prunes"))
