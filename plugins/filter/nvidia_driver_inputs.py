# -*- coding: utf-8 -*-
# Apache-2.0
"""Filter for the nvidia_driver role's input checks (documentation:
nvidia_driver_input_problems.yml beside this file). The rules are
module_utils/driver_inputs.py's, unit-tested alone."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.smshare.kai.plugins.module_utils import driver_inputs as _driver_inputs
from ansible_collections.smshare.kai.plugins.module_utils.plain import plain as _plain


def nvidia_driver_input_problems(values, omit=None):
    """omit: Ansible's omit placeholder; a variable given as it counts as unset."""
    if not isinstance(values, dict):
        raise AnsibleFilterError("nvidia_driver_input_problems: expected the role's variables by name, got %s"
                                 % type(values).__name__)
    given = dict((name, value) for name, value in values.items()
                 if omit is None or not (value is omit or value == omit))
    return _driver_inputs.problems(_plain(given))


class FilterModule(object):
    def filters(self):
        return {"nvidia_driver_input_problems": nvidia_driver_input_problems}
