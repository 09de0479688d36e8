# -*- coding: utf-8 -*-
# Apache-2.0
"""The `--format=csv` output that nvidia-smi and nvidia-cuda-mps-control print.

Both tools print a header line, then one line per row, cells separated by
", " and never quoted. The header is always requested and checked against the
columns the caller expects, so a tool that renames, adds or reorders a column
fails loudly instead of shifting values into the wrong keys.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def _cells(line):
    return [cell.strip() for cell in line.split(",")]


def parse_csv(out, columns):
    """Rows of `out` as lists of stripped cells, one per entry of `columns`.

    The first non-blank line must name exactly `columns` in order (compared
    without case and surrounding blanks). ValueError when the header is missing
    or different, or a row has another number of cells (a value with a comma).
    """
    lines = [line for line in out.splitlines() if line.strip()]
    if not lines:
        raise ValueError("no header line")
    expected = [column.strip().lower() for column in columns]
    if [cell.lower() for cell in _cells(lines[0])] != expected:
        raise ValueError("expected the header %r, got %r" % (", ".join(columns), lines[0]))
    rows = []
    for line in lines[1:]:
        cells = _cells(line)
        if len(cells) != len(expected):
            raise ValueError("row with %d cells instead of %d: %r" % (len(cells), len(expected), line))
        rows.append(cells)
    return rows
