# -*- coding: utf-8 -*-
# Apache-2.0
"""Ansible's lazy containers and tagged values, as the filters receive them, made plain
dicts, lists and strings for the pure rule engines in module_utils; an error's text
made one line for a message."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type


def plain(value):
    """Dicts (string keys), lists and strings all the way down; other scalars as they are."""
    if isinstance(value, dict):
        return dict((str(k), plain(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    return value


def one_line(text, limit=300):
    """An error's text on one line, at most `limit` characters ('' for none)."""
    text = " ".join(str(text if text is not None else "").split())
    return text if len(text) <= limit else text[:limit - 3] + "..."
