# -*- coding: utf-8 -*-
# Apache-2.0
"""When a converge needs the smoke test again: the record of its last passes and the plan.

site.yml runs the smoke test only where something the fractions depend on
changed since the node last passed, or that pass is older than a limit
(the smoke_test role's smoke_test_run: on_change). What they depend on:
- per node: its boot (a driver install reboots it), kernel, kubelet and
  container runtime, the GPU labels the GPU Operator's feature discovery sets
  (driver version, product, count, memory) and its allocatable GPUs;
- for every node: the installed helm releases (the Secret helm writes for the
  deployed revision: a new uid on every upgrade and on a reinstall) and the
  smoke test's own inputs.
The record is a ConfigMap the role writes after a pass: one short fingerprint
and pass time per node, so a fleet of thousands fits in one object.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import hashlib
import json

RECORD_KEY = "record.json"
VERSION = 1
# Node labels whose change means the GPU stack under the fractions changed.
GPU_LABEL_PREFIXES = ("nvidia.com/cuda.driver", "nvidia.com/cuda.runtime", "nvidia.com/gpu.product",
                      "nvidia.com/gpu.count", "nvidia.com/gpu.memory", "nvidia.com/gpu.replicas",
                      "nvidia.com/mig.")


def _digest(value):
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def node_state(node):
    """What of one Node object the fractions depend on."""
    metadata = node.get("metadata") or {}
    status = node.get("status") or {}
    info = status.get("nodeInfo") or {}
    labels = metadata.get("labels") or {}
    return {
        "boot": info.get("bootID", ""),
        "kernel": info.get("kernelVersion", ""),
        "kubelet": info.get("kubeletVersion", ""),
        "runtime": info.get("containerRuntimeVersion", ""),
        "gpu_labels": dict((k, v) for k, v in labels.items() if k.startswith(GPU_LABEL_PREFIXES)),
        "gpus": str((status.get("allocatable") or {}).get("nvidia.com/gpu", "0")),
    }


def release_state(releases):
    """{"<namespace>/<name>": uid of the deployed revision's Secret, or "absent"}.

    releases: [{"namespace", "name", "secrets": [Secret objects helm labelled]}]."""
    found = {}
    for release in releases:
        key = "%s/%s" % (release.get("namespace", ""), release.get("name", ""))
        deployed = [s for s in release.get("secrets") or []
                    if ((s.get("metadata") or {}).get("labels") or {}).get("status") == "deployed"]
        deployed.sort(key=lambda s: int(((s.get("metadata") or {}).get("labels") or {}).get("version", "0") or 0))
        found[key] = (deployed[-1].get("metadata") or {}).get("uid", "?") if deployed else "absent"
    return found


def fingerprints(nodes, releases, inputs):
    """{node name: fingerprint} for the nodes (Node objects) under these releases and inputs."""
    shared = {"releases": release_state(releases), "inputs": inputs}
    return dict(((n.get("metadata") or {}).get("name", ""), _digest({"node": node_state(n), "shared": shared}))
                for n in nodes)


def parse_record(configmap):
    """The record in a ConfigMap object (or none): {"version", "nodes": {name: {fingerprint, passed_at}}}."""
    empty = {"version": VERSION, "nodes": {}}
    if not configmap:
        return empty
    try:
        record = json.loads(((configmap.get("data") or {}).get(RECORD_KEY)) or "{}")
    except ValueError:
        return empty
    if not isinstance(record, dict) or record.get("version") != VERSION or not isinstance(record.get("nodes"), dict):
        return empty
    nodes = {}
    for name, entry in record["nodes"].items():
        if isinstance(entry, dict) and isinstance(entry.get("fingerprint"), str):
            try:
                nodes[str(name)] = {"fingerprint": entry["fingerprint"], "passed_at": float(entry.get("passed_at", 0))}
            except (TypeError, ValueError):
                continue
    return {"version": VERSION, "nodes": nodes}


def plan(wanted, node_objects, releases, inputs, record, now, max_age_seconds, always=False):
    """Which of the wanted nodes to test: {"run": [...], "skip": [...], "reasons": {node: why},
    "fingerprints": {node: fp}, "lines": ["<node>: tested|not tested, <why>"]}. A node runs when asked (always), never passed, changed since
    its last pass, or passed longer than max_age_seconds ago; a wanted node the cluster
    does not list runs too (the smoke test then names it)."""
    by_name = dict(((n.get("metadata") or {}).get("name", ""), n) for n in node_objects)
    prints = fingerprints([by_name[w] for w in wanted if w in by_name], releases, inputs)
    passed = record.get("nodes", {})
    run, skip, reasons = [], [], {}
    for node in wanted:
        last = passed.get(node)
        if always:
            why = "asked to run (smoke_test_run: always)"
        elif node not in prints:
            why = "not a Node of the cluster"
        elif last is None:
            why = "no recorded pass"
        elif last["fingerprint"] != prints[node]:
            why = "changed since its last pass (node boot, kernel, runtime, GPU labels, a release or the test's inputs)"
        elif now - last["passed_at"] > max_age_seconds:
            why = "last pass %.1f h ago, older than %.1f h" % ((now - last["passed_at"]) / 3600.0, max_age_seconds / 3600.0)
        else:
            why = None
        if why is None:
            skip.append(node)
            reasons[node] = "passed %.1f h ago with the same node, releases and inputs" % ((now - last["passed_at"]) / 3600.0)
        else:
            run.append(node)
            reasons[node] = why
    return {"run": run, "skip": skip, "reasons": reasons, "fingerprints": prints,
            "lines": ["%s: %s, %s" % (n, "tested" if n in run else "not tested", reasons[n]) for n in wanted]}


def updated_record(record, planned, passed_nodes, now):
    """The record after a run: each node that passed gets its fingerprint and this time; the
    entries of nodes that did not run are kept; a node that ran and failed loses its entry."""
    nodes = dict(record.get("nodes", {}))
    for node in planned["run"]:
        nodes.pop(node, None)
    for node in passed_nodes:
        if node in planned["fingerprints"]:
            nodes[node] = {"fingerprint": planned["fingerprints"][node], "passed_at": float(now)}
    return {"version": VERSION, "nodes": dict(sorted(nodes.items()))}


def record_data(record):
    """The ConfigMap's data for a record."""
    return {RECORD_KEY: json.dumps(record, sort_keys=True, separators=(",", ":"))}
