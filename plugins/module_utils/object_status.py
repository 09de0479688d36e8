# -*- coding: utf-8 -*-
# Apache-2.0
"""The status the API server reports, read as the cluster roles' checks read it:
pods owned by an object, Deployments and DaemonSets ready as `kubectl rollout
status` means it, conditions. Pure functions of their inputs (filters:
plugins/filter/object_status.py; the wait predicates of
module_utils/readiness.py build on them)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type


def _owned_by(pod, uid):
    return any(ref.get("uid") == uid for ref in (pod.get("metadata") or {}).get("ownerReferences") or [])


def owned_pods(pods, uid):
    """The pods whose ownerReferences name the object with this uid."""
    return [pod for pod in pods or [] if uid and _owned_by(pod, uid)]


def _pod_ready(pod):
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def _pod_reason(pod):
    status = pod.get("status") or {}
    for entry in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
        state = entry.get("state") or {}
        for kind in ("waiting", "terminated"):
            if state.get(kind) and state[kind].get("reason"):
                return "%s %s" % (entry.get("name"), state[kind]["reason"])
    return status.get("reason") or status.get("phase") or "not ready"


def deployments_ready(deployments):
    """One row per Deployment, ready as `kubectl rollout status` means it: the
    Available condition True, the latest generation observed, every replica
    updated and available. Row keys: name, ready, replicas, available, ok, reason."""
    rows = []
    for deploy in deployments or []:
        meta = deploy.get("metadata") or {}
        status = deploy.get("status") or {}
        wanted = int((deploy.get("spec") or {}).get("replicas", 1) or 0)
        available = int(status.get("availableReplicas") or 0)
        updated = int(status.get("updatedReplicas") or 0)
        condition = conditions(deploy).get("Available") or {}
        reason = ""
        if int(status.get("observedGeneration") or 0) < int(meta.get("generation") or 0):
            reason = "the controller has not observed the latest spec yet"
        elif condition.get("status") != "True":
            reason = "Available=%s%s" % (condition.get("status") or "missing",
                                         (" (%s: %s)" % (condition.get("reason"), condition.get("message"))
                                          if condition.get("reason") else ""))
        elif updated < wanted or available < wanted or int(status.get("replicas") or 0) > wanted:
            reason = "rollout in progress: %d of %d replicas updated, %d available" % (updated, wanted, available)
        rows.append({"name": meta.get("name"), "replicas": wanted, "available": available,
                     "ok": reason == "", "reason": reason})
    return rows


def daemonsets_ready(daemonsets, pods):
    """One row per DaemonSet: desired, ready, and the pods (with their nodes)
    that are not ready. Row keys: name, component (its pods'
    app.kubernetes.io/component label, else its name), uid, desired, ready, ok,
    not_ready (list of {pod, node, reason}), missing (desired minus the pods
    that exist)."""
    rows = []
    for ds in daemonsets or []:
        meta = ds.get("metadata") or {}
        status = ds.get("status") or {}
        desired = int(status.get("desiredNumberScheduled") or 0)
        ready = int(status.get("numberReady") or 0)
        mine = [p for p in pods or [] if _owned_by(p, meta.get("uid"))]
        not_ready = [{"pod": (p.get("metadata") or {}).get("name"),
                      "node": (p.get("spec") or {}).get("nodeName") or "(unscheduled)",
                      "reason": _pod_reason(p)}
                     for p in mine if not _pod_ready(p)]
        labels = (((ds.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}
        rows.append({"name": meta.get("name"), "desired": desired, "ready": ready,
                     "component": labels.get("app.kubernetes.io/component") or meta.get("name"),
                     "uid": meta.get("uid"),
                     "ok": desired > 0 and desired == ready and not not_ready,
                     "not_ready": not_ready, "missing": max(desired - len(mine), 0)})
    return rows


def conditions(obj):
    """{type: {status, reason, message}} from an object's status.conditions."""
    found = {}
    for condition in ((obj or {}).get("status") or {}).get("conditions") or []:
        found[condition.get("type")] = {"status": condition.get("status"),
                                        "reason": condition.get("reason") or "",
                                        "message": condition.get("message") or ""}
    return found


def nodes_condition(nodes, kind):
    """One row per Node: its condition `kind`. Row keys: node, status, reason, message, ok."""
    rows = []
    for node in nodes or []:
        value = conditions(node).get(kind) or {}
        rows.append({"node": (node.get("metadata") or {}).get("name"), "status": value.get("status") or "missing",
                     "reason": value.get("reason") or "", "message": value.get("message") or "",
                     "ok": value.get("status") == "True"})
    return rows


def condition_summary(obj):
    """'Type=Status (Reason: message), ...' of an object's conditions, for messages."""
    parts = []
    for kind, value in conditions(obj).items():
        detail = ": ".join(p for p in (value["reason"], value["message"]) if p)
        parts.append("%s=%s%s" % (kind, value["status"], " (%s)" % detail if detail else ""))
    return ", ".join(parts) or "no conditions"
