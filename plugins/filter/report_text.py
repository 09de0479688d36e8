# -*- coding: utf-8 -*-
# Apache-2.0
"""Filters that put what the roles read into words and lines: chart value paths, a text
table. Documentation: the .yml files beside this one. Pure functions of their inputs:
the unit tests call them alone. stat_kind is no filter: preflight_runtime_rows words its
stat results with it."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

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


class FilterModule(object):
    def filters(self):
        return {
            "value_paths": value_paths,
            "text_table": text_table,
        }
