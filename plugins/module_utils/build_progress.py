# -*- coding: utf-8 -*-
# Apache-2.0
"""What a long image build has reached, in one line (the build_wait action prints
it every report_interval seconds instead of a "FAILED - RETRYING" line per poll).

The forks' Makefiles run `docker buildx build` for each image in turn, whose
plain progress in a log file reads `#12 [builder 3/7] RUN go build ...`;
podman and buildah (the lab's stand-in builds) print `STEP 3/7: RUN ...`. The
step is the newest such line; the last line is the log's last non-empty line,
shortened."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

REPORT_INTERVAL = 300
TAIL_LINES = 40
WIDTH = 160
BUILDX_STEP = re.compile(r"^#\d+ \[([^\]]+)\] (.*)$")
BUILDAH_STEP = re.compile(r"^STEP (\d+/\d+): (.*)$")


def _short(text, width=WIDTH):
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 3] + "..."


def stage(lines):
    """The newest build step in lines ('builder 3/7: RUN go build ./...'), or None."""
    for line in reversed(lines or []):
        found = BUILDX_STEP.match(line.strip()) or BUILDAH_STEP.match(line.strip())
        if found:
            return "%s: %s" % (found.group(1), found.group(2))
    return None


def report(host, name, elapsed, lines):
    """One progress line for `name` on `host`, `elapsed` seconds in, from its log's last lines."""
    lines = [line for line in lines or [] if line.strip()]
    parts = ["%s: %s building for %d min" % (host, name, int(elapsed) // 60)]
    reached = stage(lines)
    if reached:
        parts.append("step " + _short(reached, 100))
    parts.append("last line: " + _short(lines[-1]) if lines else "the log is empty so far")
    return "; ".join(parts)
