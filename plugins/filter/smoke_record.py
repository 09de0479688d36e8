# -*- coding: utf-8 -*-
# Apache-2.0
"""Filters for the smoke_test role's on-change runs (documentation: smoke_plan.yml and
smoke_record_data.yml beside this file). The rules are module_utils/smoke_record.py."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import math
import time

from ansible.errors import AnsibleFilterError

from ansible_collections.smshare.kai.plugins.module_utils import smoke_record as _record
from ansible_collections.smshare.kai.plugins.module_utils.plain import plain as _plain


def _hours(value, name):
    try:
        hours = float(value)
    except (TypeError, ValueError):
        raise AnsibleFilterError("%s: max_age_hours %r is not a number" % (name, value))
    if math.isnan(hours) or hours < 0:
        raise AnsibleFilterError("%s: max_age_hours %r must be 0 or more" % (name, value))
    return hours


def smoke_plan(wanted, nodes, releases, release_secrets, inputs, record=None, max_age_hours=24, always=False, now=None):
    if not all(isinstance(v, list) for v in (wanted, nodes, releases, release_secrets)):
        raise AnsibleFilterError("smoke_plan: expected the wanted node names, the Node objects, the releases and "
                                 "their Secrets as lists")
    if len(releases) != len(release_secrets):
        raise AnsibleFilterError("smoke_plan: %d releases but %d lists of Secrets" % (len(releases), len(release_secrets)))
    releases = [dict(_plain(r), secrets=_plain(s) or []) for r, s in zip(releases, release_secrets)]
    return _record.plan([str(w) for w in wanted], _plain(nodes), releases, _plain(inputs),
                        _record.parse_record(_plain(record) if record else None),
                        time.time() if now is None else float(now),
                        _hours(max_age_hours, "smoke_plan") * 3600.0, bool(always))


def smoke_record_data(planned, passed_nodes, record=None, now=None):
    if not isinstance(planned, dict) or not isinstance(passed_nodes, list):
        raise AnsibleFilterError("smoke_record_data: expected the plan (smoke_plan) and the names of the nodes that passed")
    return _record.record_data(_record.updated_record(
        _record.parse_record(_plain(record) if record else None), _plain(planned),
        [str(n) for n in passed_nodes], time.time() if now is None else float(now)))


class FilterModule(object):
    def filters(self):
        return {"smoke_plan": smoke_plan, "smoke_record_data": smoke_record_data}
