# -*- coding: utf-8 -*-
# Apache-2.0
"""Filter for the nvidia_driver role's plan (documentation: nvidia_driver_plan.yml
beside this file). The rule is module_utils/driver_plan.py's plan, unit-tested alone."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.smshare.kai.plugins.module_utils import driver_plan as _driver_plan
from ansible_collections.smshare.kai.plugins.module_utils.plain import plain as _plain

WANTED = ("branch", "pin_package", "keyring_list", "auth_file", "sources_file", "sources_fields",
          "blacklist_file", "versions", "persistenced", "fabricmanager")


def nvidia_driver_plan(state, want):
    state, want = _plain(state), _plain(want)
    if not isinstance(state, dict):
        raise AnsibleFilterError("nvidia_driver_plan: expected smshare.kai.nvidia_driver_info's result, got %s"
                                 % type(state).__name__)
    missing = [key for key in WANTED if key not in (want if isinstance(want, dict) else {})]
    if missing:
        raise AnsibleFilterError("nvidia_driver_plan: the wanted state lacks %s" % ", ".join(missing))
    return _driver_plan.plan(state, want)


class FilterModule(object):
    def filters(self):
        return {"nvidia_driver_plan": nvidia_driver_plan}
