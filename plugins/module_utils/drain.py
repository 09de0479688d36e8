# -*- coding: utf-8 -*-
# Apache-2.0
"""What stands in a node's drain's way, read before anything is touched.

- drain_plan(): the pods the drain refuses or should not be the one to remove:
  KAI's reservation pods (bare; the binder deletes and re-creates them itself),
  the other pods no controller manages (bare fractions among them), and the
  pods annotated karpenter.sh/do-not-disrupt, each with its fate;
- budget_blocks(): the PodDisruptionBudgets an eviction of the node's pods
  would violate (the API server then answers 429, and a drain waits forever).
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.smshare.kai.plugins.module_utils.gpu_holders import (
    DO_NOT_DISRUPT, MIRROR, RESERVATION_NAMESPACE, pod_gpu_reasons, running_on)


def _bare(meta):
    return not meta.get("ownerReferences") and MIRROR not in (meta.get("annotations") or {})


def _fate(meta, reasons, force, policy, selective):
    """What the rollout does to a pod before or during the drain."""
    owners = [o.get("kind") for o in meta.get("ownerReferences") or []]
    if meta.get("namespace") == RESERVATION_NAMESPACE:
        return "deleted before the drain (KAI's binder re-creates it where a fraction needs it)"
    if MIRROR in (meta.get("annotations") or {}):
        return "left running (a static pod: the drain cannot remove it)"
    if "DaemonSet" in owners:
        return "left running (the drain leaves DaemonSet pods)"
    if not owners:
        if force:
            return "deleted by the drain (driver_upgrade_drain_force)"
        then = ("then deleted" if policy == "delete" else
                "then the node stops here, cordoned, with its driver unchanged")
        return "a bare pod: waited for up to driver_upgrade_bare_pods_timeout, %s (driver_upgrade_bare_pods: %s)" % (
            then, policy)
    return "evicted by the drain%s" % (" if driver_upgrade_drain_pod_selectors select it" if selective else "")


def drain_plan(pods, node_name, force=False, policy="stop", selective=False):
    """What stands in the drain's way on node_name, before anything is touched.

    - do_not_disrupt: the pods annotated karpenter.sh/do-not-disrupt, each with its fate;
    - reservation: KAI's reservation pods (bare: the drain refuses them; the
      binder deletes and re-creates them itself, so deleting them is safe);
    - bare: the other pods with no owner (the drain refuses them unless forced),
      each with what it holds. Finished pods are left out: the drain deletes them.
    Rows as holding_pods() writes them: namespace, name, why, action, text.
    """
    plan = {"do_not_disrupt": [], "reservation": [], "bare": []}
    for pod in running_on(pods, node_name):
        meta = pod.get("metadata") or {}
        reasons = pod_gpu_reasons(pod)
        annotations = meta.get("annotations") or {}
        do_not_disrupt = str(annotations.get(DO_NOT_DISRUPT, "")).lower() == "true"
        why = ", ".join((reasons or ["holds no GPU"]) + (["annotated %s" % DO_NOT_DISRUPT] if do_not_disrupt else []))
        row = {"kind": "pod", "namespace": meta.get("namespace", ""), "name": meta.get("name", ""),
               "why": why, "action": _fate(meta, reasons, force, policy, selective)}
        row["text"] = "pod %s/%s (%s): %s" % (row["namespace"], row["name"], row["why"], row["action"])
        if do_not_disrupt:
            plan["do_not_disrupt"].append(row)
        if meta.get("namespace") == RESERVATION_NAMESPACE:
            plan["reservation"].append(row)
        elif _bare(meta) and not force:
            plan["bare"].append(row)
    for rows in plan.values():
        rows.sort(key=lambda r: (r["namespace"], r["name"]))
    return plan


def selector_matches(selector, labels, empty_matches_all=True):
    """Whether a LabelSelector (matchLabels, matchExpressions) selects these labels.
    A null selector selects nothing; an empty one everything in policy/v1, nothing in v1beta1."""
    if selector is None:
        return False
    labels = labels or {}
    wanted = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not wanted and not expressions:
        return empty_matches_all
    if any(labels.get(key) != value for key, value in wanted.items()):
        return False
    for expression in expressions:
        key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
        if operator == "In":
            ok = key in labels and labels[key] in values
        elif operator == "NotIn":
            ok = key not in labels or labels[key] not in values
        elif operator == "Exists":
            ok = key in labels
        elif operator == "DoesNotExist":
            ok = key not in labels
        else:   # the API server refuses such a selector
            ok = False
        if not ok:
            return False
    return True


def _evicted(pod, node_name, force):
    """Whether the drain evicts this pod with the Eviction API (which budgets guard) while it runs."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    if spec.get("nodeName") != node_name or meta.get("deletionTimestamp"):
        return False
    # The API server lets a pod that does not run go whatever its budget says.
    if status.get("phase") != "Running":
        return False
    if meta.get("namespace") == RESERVATION_NAMESPACE or MIRROR in (meta.get("annotations") or {}):
        return False   # deleted by the rollout first / never removed through the API
    owners = [o.get("kind") for o in meta.get("ownerReferences") or []]
    if "DaemonSet" in owners:
        return False
    return bool(owners) or force


def _allowed(pdb):
    """Disruptions the budget allows now; 0 while its status trails its spec (the API server answers 429)."""
    meta, status = pdb.get("metadata") or {}, pdb.get("status") or {}
    if int(status.get("observedGeneration") or 0) < int(meta.get("generation") or 0):
        return 0
    return int(status.get("disruptionsAllowed") or 0)


def budget_blocks(pdbs, pods, node_name, force=False):
    """The PodDisruptionBudgets that would refuse the eviction of node_name's pods, as rows
    {namespace, name, allowed, pods, text}; and a row per pod under several budgets (the
    eviction API refuses those whatever they allow)."""
    covering = {}
    for pod in pods or []:
        if not _evicted(pod, node_name, force):
            continue
        meta = pod.get("metadata") or {}
        ref = "%s/%s" % (meta.get("namespace", ""), meta.get("name", ""))
        for pdb in pdbs or []:
            pmeta = pdb.get("metadata") or {}
            if pmeta.get("namespace") != meta.get("namespace"):
                continue
            v1 = str(pdb.get("apiVersion", "policy/v1")) == "policy/v1"
            if selector_matches((pdb.get("spec") or {}).get("selector"), meta.get("labels"), empty_matches_all=v1):
                covering.setdefault(ref, []).append(pdb)
    rows, by_budget = [], {}
    for ref, budgets in sorted(covering.items()):
        if len(budgets) > 1:
            names = ", ".join(sorted((b["metadata"].get("name", "")) for b in budgets))
            rows.append({"namespace": ref.split("/", 1)[0], "name": names, "allowed": 0, "pods": [ref],
                         "text": "pod %s falls under %d PodDisruptionBudgets (%s): the Eviction API refuses to "
                                 "evict it; leave it one budget" % (ref, len(budgets), names)})
            continue
        meta = budgets[0].get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        by_budget.setdefault(key, (budgets[0], []))[1].append(ref)
    for (namespace, name), (pdb, refs) in sorted(by_budget.items()):
        allowed = _allowed(pdb)
        if len(refs) <= allowed:
            continue
        text = "PodDisruptionBudget %s/%s allows %d disruption(s) now and draining %s would evict %d of its pods (%s)" % (
            namespace, name, allowed, node_name, len(refs), ", ".join(refs))
        rows.append({"namespace": namespace, "name": name, "allowed": allowed, "pods": refs, "text": text})
    return sorted(rows, key=lambda r: (r["namespace"], r["name"]))


def drain_refusal(drained, blocks, node_name, timeout):
    """Why kubernetes.core.k8s_drain's result `drained` did not drain node_name ('' when
    it did). A budget's refusal names the budgets that block the pods still there
    (`blocks`: budget_blocks' rows, read after the refusal), or the module's message
    where none blocks now."""
    drained = drained or {}
    if "result" in drained:
        return ""
    said = str(drained.get("msg") or "no result")
    if "disruption budget" not in said:
        return "The drain of %s failed: %s." % (node_name, said)
    why = "; ".join(row["text"] for row in blocks or []) or said
    return ("The drain of %s was refused by disruption budgets until driver_upgrade_drain_timeout (%s s): %s. The "
            "driver was not changed; once the budgets allow it, run the rollout again." % (node_name, timeout, why))
