# -*- coding: utf-8 -*-
# Apache-2.0
"""Filters that put what the roles read into words and lines: a stat result, chart value
paths, the current run of a log, the patterns no line matches, a text table.
Documentation: the .yml files beside this one. Pure functions of their inputs: the unit
tests call them alone."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

from ansible_collections.smshare.kai.plugins.module_utils.fractioning_checks import since_last  # noqa: F401 (a filter)
from ansible_collections.smshare.kai.plugins.module_utils.text_table import text_table  # noqa: F401 (a filter)


def stat_kind(stat):
    """What ansible.builtin.stat found, in words: socket, missing, link to X, ..."""
    stat = stat or {}
    if not stat.get("exists"):
        return "missing"
    if stat.get("islnk"):
        return "link to %s" % stat.get("lnk_source")
    for key, word in (("issock", "socket"), ("isreg", "regular file"), ("isdir", "folder"),
                      ("isfifo", "fifo"), ("ischr", "character device"), ("isblk", "block device")):
        if stat.get(key):
            return word
    return "other file"


def value_paths(values, prefix=""):
    """Every key path of nested chart values, dotted (global, global.tag, ...)."""
    paths = []
    if isinstance(values, dict):
        for key, value in values.items():
            path = "%s.%s" % (prefix, key) if prefix else str(key)
            paths.append(path)
            paths.extend(value_paths(value, path))
    return paths


def missing_patterns(lines, patterns):
    """The patterns (re.search) no line matches."""
    return [p for p in patterns or [] if not any(re.search(p, line) for line in lines or [])]


class FilterModule(object):
    def filters(self):
        return {
            "stat_kind": stat_kind,
            "value_paths": value_paths,
            "since_last": since_last,
            "missing_patterns": missing_patterns,
            "text_table": text_table,
        }
