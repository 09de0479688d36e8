# -*- coding: utf-8 -*-
# Apache-2.0
"""The nodes where a GPU Operator driver pod of a version runs and is ready
(documentation: driver_pod_nodes.yml beside this file)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

from ansible.errors import AnsibleFilterError


def _tag_version(image):
    """615.71.09 from nvcr.io/nvidia/driver:615.71.09-ubuntu24.04 (None without a tag)."""
    match = re.search(r":([0-9]+(?:\.[0-9]+)+)(?:-[\w.]+)?$", image or "")
    return match.group(1) if match else None


def driver_pod_nodes(pods, version):
    """Sorted names of the nodes running a ready, not terminating driver pod of `version`."""
    if isinstance(pods, dict):
        pods = pods.get("resources") or []
    if not isinstance(pods, list):
        raise AnsibleFilterError("driver_pod_nodes: expected a list of pods or a k8s_info result, got %r"
                                 % type(pods).__name__)
    nodes = set()
    for pod in pods:
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        if meta.get("deletionTimestamp") or status.get("phase") != "Running" or not spec.get("nodeName"):
            continue
        ready = [c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"]
        images = [c.get("image") for c in spec.get("containers") or []]
        if ready == ["True"] and any(_tag_version(image) == str(version) for image in images):
            nodes.add(spec["nodeName"])
    return sorted(nodes)


class FilterModule(object):
    def filters(self):
        return {"driver_pod_nodes": driver_pod_nodes}
