# -*- coding: utf-8 -*-
# Apache-2.0
"""Who placed a pod, and where (documentation: pod_placement.yml beside this file). The
reading is module_utils/smoke_checks.py's placement(), which the smoke test's checks use too."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.smshare.kai.plugins.module_utils import smoke_checks as _smoke_checks
from ansible_collections.smshare.kai.plugins.module_utils.plain import plain as _plain


def pod_placement(pod, events=None, scheduler=None):
    if pod is None:
        pod = {}
    if not isinstance(pod, dict):
        raise AnsibleFilterError("pod_placement: expected a Pod object (a mapping), got %s" % type(pod).__name__)
    if events is not None and not isinstance(events, list):
        raise AnsibleFilterError("pod_placement: events must be a list of Event objects")
    if scheduler is not None and (not isinstance(scheduler, str) or not scheduler):
        raise AnsibleFilterError("pod_placement: scheduler must be a scheduler's name")
    return _smoke_checks.placement(_plain(pod), _plain(events or []), scheduler)


class FilterModule(object):
    def filters(self):
        return {"pod_placement": pod_placement}
