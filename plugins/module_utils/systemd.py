# -*- coding: utf-8 -*-
# Apache-2.0
"""systemd units as read-only modules report them (`systemctl show`)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.smshare.kai.plugins.module_utils.runner import CommandRunner

PROPERTIES = ("Id", "LoadState", "UnitFileState", "ActiveState")
UNKNOWN = {"load": None, "enabled": None, "active": None}


def parse_show(text):
    """`systemctl show --property=...` for several units -> {Id: {load, enabled, active}}."""
    units = {}
    for block in text.split("\n\n"):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if props.get("Id"):
            units[props["Id"]] = {"load": props.get("LoadState") or None,
                                  "enabled": props.get("UnitFileState") or None,
                                  "active": props.get("ActiveState") or None}
    return units


def unit_states(module, units):
    """{unit: {load, enabled, active}}; every value None when systemd cannot be
    asked (no systemctl, or no running systemd as in a chroot)."""
    runner = CommandRunner(module, "systemctl")
    if not runner.available or not units:
        return dict((unit, dict(UNKNOWN)) for unit in units)
    result = runner.run(["show", "--property=" + ",".join(PROPERTIES), "--"] + list(units))
    found = parse_show(result.stdout) if result.rc == 0 else {}
    return dict((unit, found.get(unit, dict(UNKNOWN))) for unit in units)
