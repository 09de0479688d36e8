# -*- coding: utf-8 -*-
# Apache-2.0
"""The filter over a chart's declared dependencies (documentation:
chart_missing_dependencies.yml beside this file). The rule is
module_utils/chart_dependencies.py."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import posixpath

from ansible.errors import AnsibleFilterError

from ansible_collections.smshare.kai.plugins.module_utils import chart_dependencies as _deps
from ansible_collections.smshare.kai.plugins.module_utils.plain import plain as _plain


def chart_missing_dependencies(chart, entries):
    if not isinstance(entries, list):
        raise AnsibleFilterError("chart_missing_dependencies: expected the charts/ folder's entries as a list, got %s"
                                 % type(entries).__name__)
    names = [posixpath.basename(str(entry).rstrip("/")) for entry in _plain(entries)]
    try:
        return _deps.missing(_plain(chart), names)
    except ValueError as exc:
        raise AnsibleFilterError("chart_missing_dependencies: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"chart_missing_dependencies": chart_missing_dependencies}
