# -*- coding: utf-8 -*-
# Apache-2.0
"""Which of a chart's declared dependencies its charts/ folder lacks: the rule
behind the chart step's `helm dependency build` (helm needs every declared
dependency there, whatever its condition, or the install stops with "found in
Chart.yaml, but missing in charts/ directory")."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

# <name>-<version>.tgz as `helm dependency build` writes it (a version such as
# 0.1.0, v1.2.3 or 1.0.0-rc1); an unpacked dependency is a folder named <name>.
ARCHIVE_RE = re.compile(r"-v?[0-9][^-]*(-[^.]+)?\.tgz\Z")


def present_names(entries):
    """The dependency names charts/ holds, from its entries' base names."""
    names = set()
    for entry in entries:
        names.add(entry)
        if ARCHIVE_RE.search(entry):
            names.add(ARCHIVE_RE.sub("", entry))
    return names


def missing(chart, entries):
    """The names of `chart`'s declared dependencies (Chart.yaml as a dict) that
    `entries` (the base names in its charts/ folder) lack, in Chart.yaml's order."""
    if not isinstance(chart, dict):
        raise ValueError("expected Chart.yaml as a mapping, got %s" % type(chart).__name__)
    declared = chart.get("dependencies") or []
    if not isinstance(declared, list):
        raise ValueError("Chart.yaml's dependencies is %s, not a list" % type(declared).__name__)
    have = present_names(entries or [])
    wanted = []
    for index, dependency in enumerate(declared):
        name = dependency.get("name") if isinstance(dependency, dict) else None
        if not name:
            raise ValueError("Chart.yaml's dependencies[%d] has no name" % index)
        if name not in have and name not in wanted:
            wanted.append(name)
    return wanted
