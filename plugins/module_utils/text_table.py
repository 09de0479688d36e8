# -*- coding: utf-8 -*-
# Apache-2.0
"""Rows as the aligned text table the roles print (the filter smshare.kai.text_table)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type


def text_table(rows, columns):
    """rows (dicts) as aligned text lines under a header; columns: keys in order."""
    cells = [[str(c).upper() for c in columns]]
    for row in rows or []:
        cells.append(["" if row.get(c) is None else str(row.get(c)) for c in columns])
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in cells]
