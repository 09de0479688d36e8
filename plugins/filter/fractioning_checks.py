# -*- coding: utf-8 -*-
# Apache-2.0
"""Filters for what the gpu_fractioning role's verify reads in the fork's daemon
logs and conditions (documentation: mpsd_startup.yml,
fractioning_failing_containers.yml and fractioning_symptoms.yml beside this file).
The rules are module_utils/fractioning_checks.py."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.smshare.kai.plugins.module_utils import fractioning_checks as _checks
from ansible_collections.smshare.kai.plugins.module_utils.plain import plain as _plain


def mpsd_startup(lines, percentage=_checks.DEFAULT_PERCENTAGE, server=_checks.SERVER):
    if isinstance(lines, str):
        lines = lines.splitlines()
    if not isinstance(lines, list):
        raise AnsibleFilterError("mpsd_startup: expected log lines (a list or a text), got %s" % type(lines).__name__)
    try:
        percentage = float(percentage)
    except (TypeError, ValueError):
        raise AnsibleFilterError("mpsd_startup: percentage %r is not a number" % (percentage,))
    return _checks.mpsd_startup([str(line) for line in lines], percentage, str(server))


def fractioning_current_daemonsets(daemonsets, config=None):
    if isinstance(daemonsets, dict):
        daemonsets = daemonsets.get("resources") or []
    if isinstance(config, list):
        config = config[0] if config else None
    return _checks.current_daemonsets(_plain(daemonsets or []), _plain(config) if config else None)


def fractioning_failing_containers(pods, rows=None):
    if isinstance(pods, dict):
        pods = pods.get("resources") or []
    return _checks.failing_containers(_plain(pods or []), None if rows is None else _plain(rows))


def fractioning_symptoms(logs, config=None, settings=None, nodes=None):
    if isinstance(logs, dict):
        logs = logs.get("results") or []
    if isinstance(nodes, dict):
        nodes = nodes.get("resources") or []
    return _checks.symptoms(_plain(logs or []), _plain(config) if config else None, _plain(settings or {}),
                            _plain(nodes or []))


class FilterModule(object):
    def filters(self):
        return {"mpsd_startup": mpsd_startup, "fractioning_current_daemonsets": fractioning_current_daemonsets,
                "fractioning_failing_containers": fractioning_failing_containers,
                "fractioning_symptoms": fractioning_symptoms}
