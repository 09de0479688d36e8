# -*- coding: utf-8 -*-
# Apache-2.0
"""The few host facts the nvidia_driver role needs, read in the module run that
reads the driver state, so the role needs no `setup` run of its own: the
distribution, its version, the machine architecture and kernel release as
Ansible's facts name them, and whether the host is a container (the role never
reboots one).

Parsers are pure functions of the files' text (unit-tested); read() reads them.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import platform
import shlex

from ansible_collections.smshare.kai.plugins.module_utils.run_process import read_text

# /etc/os-release ID -> Ansible's `distribution` fact (the CUDA repository's distributions).
DISTRIBUTIONS = {"debian": "Debian", "ubuntu": "Ubuntu"}
# PID 1's `container=` (systemd's convention: podman, docker with systemd, lxc,
# systemd-nspawn), then the runtimes' marker files, as Ansible's virtual facts look.
MARKERS = (("/run/.containerenv", "podman"), ("/.dockerenv", "docker"))


def parse_os_release(text):
    """os-release(5) assignments -> {KEY: value} (quotes and escapes as the shell reads them)."""
    found = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        try:
            words = shlex.split(value)
        except ValueError:
            continue
        found[key.strip()] = words[0] if words else ""
    return found


def distribution(os_release, debian_version=None):
    """Ansible's distribution, distribution_version and distribution_major_version
    from os-release's fields (Debian's point release from /etc/debian_version)."""
    ident = os_release.get("ID", "")
    name = DISTRIBUTIONS.get(ident, os_release.get("NAME", ident))
    version = os_release.get("VERSION_ID", "")
    if ident == "debian" and debian_version and debian_version.strip()[:1].isdigit():
        version = debian_version.strip()
    return {"distribution": name, "distribution_version": version,
            "distribution_major_version": version.split(".")[0] if version else ""}


def container_type(pid1_environ, existing):
    """The container runtime, from PID 1's environment (NUL-separated) and which
    marker files exist; '' on a host that is no container."""
    for entry in (pid1_environ or "").split("\0"):
        if entry.startswith("container=") and entry[len("container="):]:
            return entry[len("container="):]
    for path, kind in MARKERS:
        if path in existing:
            return kind
    return ""


def read():
    """The facts, as the role reads them (keys named as Ansible's facts)."""
    release = parse_os_release(read_text("/etc/os-release") or read_text("/usr/lib/os-release") or "")
    facts = distribution(release, read_text("/etc/debian_version"))
    container = container_type(read_text("/proc/1/environ"), [p for p, _kind in MARKERS if os.path.exists(p)])
    facts.update(architecture=platform.machine(), kernel=platform.release(),
                 virtualization_type=container, virtualization_role="guest" if container else "")
    return facts
