# -*- coding: utf-8 -*-
# Apache-2.0
"""The attributes every smshare.kai module documents, written once."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type


class ModuleDocFragment(object):

    # Modules that change state: each says how in its own `details`.
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check mode and predict what it would change, changing nothing.
  diff_mode:
    description: Returns the state before and after in diff mode.
  idempotent:
    description: A second run with the same parameters reports no change.
"""

    # Read-only modules.
    INFO_MODULE = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check mode and predict what it would change, changing nothing.
    support: full
    details: Reads only; runs the same in check mode.
  diff_mode:
    description: Returns the state before and after in diff mode.
    support: N/A
    details: Reads only.
  idempotent:
    description: A second run with the same parameters reports no change.
    support: full
    details: Reads only.
"""
