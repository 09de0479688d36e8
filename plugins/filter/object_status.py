# -*- coding: utf-8 -*-
# Apache-2.0
"""Filters over the status the API server reports: Deployments ready as `kubectl rollout
status` means it, a condition of each Node, an object's conditions in one line.
Documentation: the .yml files beside this one. The rules are module_utils/object_status.py
(pure functions: the unit tests call them alone)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.smshare.kai.plugins.module_utils.object_status import (  # noqa: F401 (the filters)
    condition_summary, deployments_ready, nodes_condition)


class FilterModule(object):
    def filters(self):
        return {
            "deployments_ready": deployments_ready,
            "nodes_condition": nodes_condition,
            "condition_summary": condition_summary,
        }
