# -*- coding: utf-8 -*-
# Apache-2.0
"""The Ansible run a module works for, as a process of the machine it runs on: found
by walking up from the module to the topmost ansible or ansible-playbook process
(the workers, forked from it, carry its command line). A lock records it, so that the
next run on the same machine can tell a holder that ended (killed, Ctrl-C) from one
that still runs. Another machine's record is never judged: its boot ID differs."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import re

PROGRAMS = ("ansible", "ansible-playbook")
RECORD_RE = re.compile(r"\Aboot=([0-9a-f-]{36}) pid=([0-9]+) start=([0-9]+)\Z")


def read_text(path):
    """A small system file's text (undecodable bytes replaced), or None when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", "replace")
    except (IOError, OSError):
        return None


def _stat(proc, pid):
    """(parent pid, start time in clock ticks since boot) of a process, or None."""
    text = read_text(os.path.join(proc, str(pid), "stat"))
    if not text or ")" not in text:
        return None
    fields = text.rsplit(")", 1)[1].split()
    try:
        return int(fields[1]), int(fields[19])
    except (IndexError, ValueError):
        return None


def _is_ansible(proc, pid):
    argv = (read_text(os.path.join(proc, str(pid), "cmdline")) or "").split("\0")
    return any(os.path.basename(arg) in PROGRAMS for arg in argv[:3])


def boot_id(proc="/proc"):
    text = (read_text(os.path.join(proc, "sys", "kernel", "random", "boot_id")) or "").strip()
    return text if re.match(r"\A[0-9a-f-]{36}\Z", text) else None


def current(proc="/proc", pid=None):
    """The record of the run this process works for ('boot=... pid=... start=...'), or None
    when no ansible process is among its ancestors (a module run some other way)."""
    boot = boot_id(proc)
    found, seen = None, 0
    pid = pid or os.getpid()
    while pid > 1 and seen < 64:
        stat = _stat(proc, pid)
        if stat is None:
            break
        if _is_ansible(proc, pid):
            found = (pid, stat[1])
        elif found:
            break   # the topmost of the ansible processes
        pid, seen = stat[0], seen + 1
    if not boot or not found:
        return None
    return "boot=%s pid=%d start=%d" % (boot, found[0], found[1])


def ended(record, proc="/proc"):
    """True when `record` names a process of this machine's current boot that is gone (or
    whose PID another process took since); False when it still runs; None when it cannot
    be told (no record, another machine or boot, a malformed record)."""
    match = RECORD_RE.match(str(record or ""))
    if not match or match.group(1) != boot_id(proc):
        return None
    stat = _stat(proc, int(match.group(2)))
    return stat is None or stat[1] != int(match.group(3))


def describe(record):
    """'pid N' of a record, for messages."""
    match = RECORD_RE.match(str(record or ""))
    return "pid %s" % match.group(2) if match else "an unknown process"
