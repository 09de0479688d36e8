# -*- coding: utf-8 -*-
# Apache-2.0
"""Filters for the preflight role's rows of the guide's "Cluster and Nodes" table
that are written in Python (documentation: preflight_*.yml and
mpsd_memory_limit.yml beside this file). The rules are
module_utils/preflight_rows.py; each filter returns rows in the role's shape
(check, found, wanted, status, fix)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.smshare.kai.plugins.module_utils import preflight_rows as _rows
from ansible_collections.smshare.kai.plugins.module_utils.plain import plain as _plain


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


def preflight_gpu_present_rows(nodes, selector=_rows.PRESENT_SELECTOR):
    return _rows.gpu_present_rows(_nodes(nodes, "preflight_gpu_present_rows"),
                                  _selector(selector, "preflight_gpu_present_rows"))


def preflight_gpu_memory_rows(nodes, selector=_rows.PRESENT_SELECTOR):
    return _rows.gpu_memory_rows(_nodes(nodes, "preflight_gpu_memory_rows"),
                                 _selector(selector, "preflight_gpu_memory_rows"))


def preflight_mpsd_memory_rows(nodes, selector=_rows.PRESENT_SELECTOR, limit=None,
                               knob="smshare_mpsd_memory_limit"):
    return _rows.mpsd_memory_rows(_nodes(nodes, "preflight_mpsd_memory_rows"),
                                  _selector(selector, "preflight_mpsd_memory_rows"),
                                  None if limit is None else str(limit), str(knob))


def mpsd_memory_limit(nodes, selector=_rows.PRESENT_SELECTOR, limit=None):
    try:
        return _rows.mpsd_memory_limit(_nodes(nodes, "mpsd_memory_limit"), _selector(selector, "mpsd_memory_limit"),
                                       None if limit is None else str(limit))
    except ValueError as exc:
        raise AnsibleFilterError("mpsd_memory_limit: %s" % exc)


def preflight_mps_v3_rows(result, managed=False):
    return [_rows.mps_v3_row(_plain(result or {}), bool(managed))]


def preflight_mps_v3_exec_rows(results, namespace="gpu-operator", daemonset="nvidia-driver-daemonset",
                               managed=False):
    if isinstance(results, dict):
        results = results.get("results") or []
    return _rows.mps_v3_exec_rows(_plain(results or []), str(namespace), str(daemonset), bool(managed))


def preflight_driver_pods(pods, daemonsets):
    if isinstance(pods, dict):
        pods = pods.get("resources") or []
    if isinstance(daemonsets, dict):
        daemonsets = daemonsets.get("resources") or []
    return _rows.driver_pods(_plain(pods or []), _plain(daemonsets or []))


def preflight_fabric_manager_rows(gpu, managed=False, method="host"):
    return _rows.fabric_manager_rows(_plain(gpu or {}), bool(managed), str(method))


def preflight_k3s_rows(socket_present, cri_socket_path, k3s_socket=_rows.K3S_CRI_SOCKET):
    return _rows.k3s_rows(bool(socket_present), str(cri_socket_path), str(k3s_socket))


class FilterModule(object):
    def filters(self):
        return {
            "preflight_gpu_present_rows": preflight_gpu_present_rows,
            "preflight_gpu_memory_rows": preflight_gpu_memory_rows,
            "preflight_mpsd_memory_rows": preflight_mpsd_memory_rows,
            "mpsd_memory_limit": mpsd_memory_limit,
            "preflight_mps_v3_rows": preflight_mps_v3_rows,
            "preflight_mps_v3_exec_rows": preflight_mps_v3_exec_rows,
            "preflight_driver_pods": preflight_driver_pods,
            "preflight_fabric_manager_rows": preflight_fabric_manager_rows,
            "preflight_k3s_rows": preflight_k3s_rows,
        }
