# -*- coding: utf-8 -*-
# Apache-2.0
"""Filters for the preflight role's rows of the guide's "Cluster and Nodes" table
(documentation: preflight_*.yml and mpsd_memory_limit.yml beside this file). The
rules are module_utils/preflight_rows.py; each filter returns rows in the role's
shape (check, found, wanted, status, fix). preflight_driver_rows,
preflight_runtime_rows and preflight_cluster_rows take what a task file
registered whole (the role's vars/main.yml passes it on); the words of a stat
result and the GPU stack's images come from report_text's stat_kind and images'
component_images."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.smshare.kai.plugins.filter.images import component_images as _component_images
from ansible_collections.smshare.kai.plugins.filter.report_text import stat_kind as _stat_kind
from ansible_collections.smshare.kai.plugins.module_utils import preflight_rows as _rows
from ansible_collections.smshare.kai.plugins.module_utils.plain import plain as _plain

RUNTIME_PATHS = ("cri_socket", "nri_socket", "containerd_config", "microk8s_dir", "k3s_cri_socket")
CLUSTER_SETTINGS = ("kubeconfig", "runtime_class", "gpu_node_selector", "min_containerd_version",
                    "gpu_stack_floors", "driver_method", "gpu_operator_namespace", "driver_daemonset")


def _nodes(nodes, name):
    if isinstance(nodes, dict):
        nodes = nodes.get("resources") or []
    if not isinstance(nodes, list):
        raise AnsibleFilterError("%s: expected a list of Node objects or a k8s_info result, got %s"
                                 % (name, type(nodes).__name__))
    return _plain(nodes)


def _selector(selector, name):
    try:
        _rows.parse_selector(selector)
    except ValueError as exc:
        raise AnsibleFilterError("%s: %s" % (name, exc))
    return str(selector)


def mpsd_memory_limit(nodes, selector=_rows.PRESENT_SELECTOR, limit=None):
    try:
        return _rows.mpsd_memory_limit(_nodes(nodes, "mpsd_memory_limit"), _selector(selector, "mpsd_memory_limit"),
                                       None if limit is None else str(limit))
    except ValueError as exc:
        raise AnsibleFilterError("mpsd_memory_limit: %s" % exc)


def preflight_driver_pods(pods, daemonsets):
    if isinstance(pods, dict):
        pods = pods.get("resources") or []
    if isinstance(daemonsets, dict):
        daemonsets = daemonsets.get("resources") or []
    return _rows.driver_pods(_plain(pods or []), _plain(daemonsets or []))


def _mapping(value, name, what):
    value = _plain(value if value is not None else {})
    if not isinstance(value, dict):
        raise AnsibleFilterError("%s: expected %s (a mapping), got %s" % (name, what, type(value).__name__))
    return value


def _given(mapping, keys, name):
    missing = [key for key in keys if key not in mapping]
    if missing:
        raise AnsibleFilterError("%s: missing %s" % (name, ", ".join(missing)))
    return mapping


def preflight_driver_rows(gpu, mps=None, branch=615, min_cuda_version="13.4", managed=False, method="host"):
    return _rows.driver_rows(_mapping(gpu, "preflight_driver_rows", "gpu_info's result"),
                             _plain(mps or {}), _plain(branch), _plain(min_cuda_version), bool(managed), str(method))


def preflight_runtime_rows(reads, paths):
    reads = _mapping(reads, "preflight_runtime_rows", "runtime.yml's results")
    paths = _given(_mapping(paths, "preflight_runtime_rows", "the paths"), RUNTIME_PATHS, "preflight_runtime_rows")
    paths = dict((key, "" if value is None else str(value)) for key, value in paths.items())
    output = (reads.get("containerd_version") or {}).get("stdout")
    nri = _rows.containerd_nri(_rows.slurped_text(reads.get("containerd_config")),
                               _rows.containerd_version(output) or None)
    return _rows.runtime_rows(reads, paths, nri, _stat_kind)


def preflight_cluster_rows(reads, settings):
    reads = _mapping(reads, "preflight_cluster_rows", "cluster.yml's results")
    settings = _given(_mapping(settings, "preflight_cluster_rows", "the settings"), CLUSTER_SETTINGS,
                      "preflight_cluster_rows")
    settings["gpu_node_selector"] = _selector(settings["gpu_node_selector"], "preflight_cluster_rows")
    limit = settings.get("mpsd_memory_limit")
    settings["mpsd_memory_limit"] = None if limit is None else str(limit)
    settings["driver_managed"] = bool(settings.get("driver_managed"))
    settings["gpu_stack_floors"] = _rows.stack_floors(settings.get("gpu_operator_minimum"),
                                                      settings["gpu_stack_floors"])
    workloads = [obj for result in (reads.get("workloads") or {}).get("results") or []
                 for obj in result.get("resources") or []]
    stack = _component_images(workloads, list(settings["gpu_stack_floors"]))
    return _rows.cluster_rows(reads, settings, stack)


def preflight_verdict(rows, host):
    if not isinstance(rows, list):
        raise AnsibleFilterError("preflight_verdict: expected the table's rows (a list), got %s" % type(rows).__name__)
    return _rows.verdict(_plain(rows), str(host))


class FilterModule(object):
    def filters(self):
        return {
            "mpsd_memory_limit": mpsd_memory_limit,
            "preflight_driver_pods": preflight_driver_pods,
            "preflight_driver_rows": preflight_driver_rows,
            "preflight_runtime_rows": preflight_runtime_rows,
            "preflight_cluster_rows": preflight_cluster_rows,
            "preflight_verdict": preflight_verdict,
        }
