# -*- coding: utf-8 -*-
# Apache-2.0
"""How many whole GPUs a pool of nodes has and how many are taken, from Node
and Pod objects (the pilot's gang step; pure Python, unit-tested alone).

A node counts when it is Ready, schedulable and matches the selector; a GPU is
taken by every non-terminated pod bound to such a node for each whole
nvidia.com/gpu it requests (KAI's reservation pods hold shared GPUs that way)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

GPU = "nvidia.com/gpu"


def _whole(value):
    try:
        return int(float(str(value)))
    except ValueError:
        return 0


def _gpus(pod):
    spec = pod.get("spec") or {}
    total = 0
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        wanted = dict(resources.get("limits") or {})
        wanted.update(resources.get("requests") or {})
        total += _whole(wanted.get(GPU, 0))
    for container in spec.get("initContainers") or []:
        resources = container.get("resources") or {}
        wanted = dict(resources.get("limits") or {})
        wanted.update(resources.get("requests") or {})
        total = max(total, _whole(wanted.get(GPU, 0)))
    return total


def capacity(nodes, pods, selector=None):
    """{"total", "taken", "free", "nodes": [{name, gpus, taken}]} of the pool."""
    selector = selector or {}
    pool = {}
    for node in nodes or []:
        meta = node.get("metadata") or {}
        labels = meta.get("labels") or {}
        if any(labels.get(k) != str(v) for k, v in selector.items()):
            continue
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (node.get("status") or {}).get("conditions") or [])
        if not ready or (node.get("spec") or {}).get("unschedulable"):
            continue
        gpus = _whole(((node.get("status") or {}).get("allocatable") or {}).get(GPU, 0))
        if gpus:
            pool[meta.get("name")] = {"name": meta.get("name"), "gpus": gpus, "taken": 0}
    for pod in pods or []:
        node = (pod.get("spec") or {}).get("nodeName")
        if node in pool and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            pool[node]["taken"] += _gpus(pod)
    rows = [pool[name] for name in sorted(pool)]
    total = sum(r["gpus"] for r in rows)
    taken = min(total, sum(r["taken"] for r in rows))
    return {"total": total, "taken": taken, "free": total - taken, "nodes": rows}
