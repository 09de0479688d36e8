# -*- coding: utf-8 -*-
# Apache-2.0
"""Filters over the status the API server reports: pods owned by an object, Deployments and
DaemonSets ready as `kubectl rollout status` means it, conditions. Documentation: the
.yml files beside this one. The rules are module_utils/object_status.py (pure functions:
the unit tests call them alone)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.smshare.kai.plugins.module_utils.object_status import (  # noqa: F401 (the filters)
    condition_summary, conditions, daemonsets_ready, deployments_ready, nodes_condition, owned_pods)


class FilterModule(object):
    def filters(self):
        return {
            "owned_pods": owned_pods,
            "deployments_ready": deployments_ready,
            "daemonsets_ready": daemonsets_ready,
            "conditions": conditions,
            "nodes_condition": nodes_condition,
            "condition_summary": condition_summary,
        }
