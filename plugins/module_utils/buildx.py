# -*- coding: utf-8 -*-
# Apache-2.0
"""docker buildx: the two read-only calls buildx_info makes and their parsers.

`docker buildx ls` (the builder list, the current one marked with `*`) and
`docker buildx inspect [NAME]` (one builder: driver, node status, the full
platform list). Both print tabwriter tables, never JSON on every version
(`ls --format json` exists from buildx 0.13 and names the current builder only
from 0.24), so both are parsed here, for the two `ls` layouts in use:
buildx >= 0.13 (`default*`, nodes indented with ` \\_ `) and older
(`default *`, nodes indented with two spaces). `ls` shortens long platform
lists (`linux/amd64 (+3)`, `(2 more)`): platforms are read from `inspect` only.

Never `--bootstrap`: reading a builder must not start its container.
Unknown output raises BuildxError quoting it, never a guess.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.smshare.kai.plugins.module_utils.registry import normalize_platform
from ansible_collections.smshare.kai.plugins.module_utils.runner import CommandRunner, ToolError

BINARY = "docker"
LS_HEADER = ("NAME/NODE", "DRIVER/ENDPOINT", "STATUS", "BUILDKIT", "PLATFORMS")
# buildx's own rule for builder names (store.ValidateName).
NAME_PATTERN = r"[a-zA-Z0-9][a-zA-Z0-9_.-]*"

NO_BUILDX_RE = re.compile(r"'buildx' is not a docker command|unknown command:? \"?(docker )?buildx|"
                          r"unknown shorthand flag.*buildx", re.I)
NO_DAEMON_RE = re.compile(r"Cannot connect to the Docker daemon[^\n]*", re.I)
NO_BUILDER_RE = re.compile(r'no builder "?([^"\s]+)"? found', re.I)


class BuildxError(ToolError):
    """A failed or unparsable docker buildx call."""


# ---------------------------------------------------------------- parsers
def parse_platforms(text):
    """'linux/amd64*, linux/arm64/v8' -> ['linux/amd64', 'linux/arm64'] (the
    '*' marks platforms set by hand; arm64/v8 is plain arm64)."""
    found = []
    for item in text.split(","):
        item = item.strip().rstrip("*").strip()
        if not item:
            continue
        if not re.match(r"^[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?$", item):
            raise ValueError("not a platform: %r" % item)
        platform = normalize_platform(item)
        if platform not in found:
            found.append(platform)
    return found


def _columns(header):
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    names = tuple(header.split())
    if names != LS_HEADER:
        raise ValueError("expected the header %s, got %r" % ("  ".join(LS_HEADER), header))
    return starts


def _cells(line, starts):
    cells = []
    for index, start in enumerate(starts):
        end = starts[index + 1] if index + 1 < len(starts) else len(line)
        cells.append(line[start:end])
    return cells


def parse_ls(out):
    """Builders of `docker buildx ls`, in its order: name, driver, current,
    status (of the builder: its nodes' status, or 'error') and nodes (name,
    endpoint, status, buildkit). Platforms are left out: `ls` may shorten them."""
    lines = [line for line in out.splitlines() if line.strip()]
    if not lines:
        raise ValueError("no output")
    starts = _columns(lines[0])
    builders = []
    for line in lines[1:]:
        cells = _cells(line, starts)
        name = cells[0]
        if not name.startswith(" "):
            name = name.strip()
            current = name.endswith("*")
            name = name.rstrip("*").strip()
            if not re.match(r"^%s$" % NAME_PATTERN, name):
                raise ValueError("not a builder line: %r" % line)
            builders.append({"name": name, "driver": cells[1].strip(), "current": current,
                             "error": cells[2].strip() == "error", "nodes": []})
            continue
        if not builders:
            raise ValueError("node line before any builder: %r" % line)
        node_name = re.sub(r"^\s*(\\_\s)?", "", name).strip()
        endpoint = re.sub(r"^\s*(\\_\s)?", "", cells[1]).strip()
        builders[-1]["nodes"].append({"name": node_name, "endpoint": endpoint,
                                      "status": cells[2].strip(), "buildkit": cells[3].strip()})
    for builder in builders:
        builder["status"] = _status(builder["nodes"], builder.pop("error"))
    return builders


def _status(nodes, error=False):
    """One word for a builder: 'error' if it or a node failed to load, else the
    first node status that is not 'running' (inactive, stopped...), else 'running'."""
    if error:
        return "error"
    statuses = [n.get("status") or ("error" if n.get("error") else "") for n in nodes]
    if not statuses:
        return "unknown"
    for status in statuses:
        if status != "running":
            return status or "unknown"
    return "running"


# `docker buildx inspect` keys read, each to the field it fills: the builder's, then each node's.
BUILDER_KEYS = {"Name": "name", "Driver": "driver", "Error": "error"}
NODE_KEYS = {"Endpoint": "endpoint", "Status": "status", "Error": "error", "BuildKit version": "buildkit",
             "Platforms": "platforms"}


def parse_inspect(out):
    """One builder of `docker buildx inspect [NAME]`: name, driver, error,
    status, platforms (every node's, full list) and nodes."""
    builder = {"name": None, "driver": None, "error": None, "nodes": []}
    node = None
    for line in out.splitlines():
        if not line.strip() or line.startswith((" ", "\t")):
            continue  # labels, GC policy and file contents are indented
        key, sep, value = line.partition(":")
        if not sep:
            raise ValueError("not a 'Key: value' line: %r" % line)
        key, value = key.strip(), value.strip()
        if key == "Nodes":
            node = False
        elif node is None:   # the builder's own lines
            if key in BUILDER_KEYS:
                builder[BUILDER_KEYS[key]] = value
        elif key == "Name":
            node = {"name": value, "endpoint": None, "status": None, "error": None,
                    "buildkit": None, "platforms": []}
            builder["nodes"].append(node)
        elif node and key in NODE_KEYS:
            node[NODE_KEYS[key]] = parse_platforms(value) if key == "Platforms" else value
    if not builder["name"] or not builder["driver"]:
        raise ValueError("no 'Name:' and 'Driver:' lines")
    platforms = []
    for each in builder["nodes"]:
        platforms += [p for p in each["platforms"] if p not in platforms]
    builder["platforms"] = platforms
    builder["status"] = _status(builder["nodes"], builder["error"] is not None)
    errors = [builder["error"]] + [n["error"] for n in builder["nodes"]]
    builder["error"] = "; ".join(e for e in errors if e) or None
    return builder


# ---------------------------------------------------------------- client
class Buildx:
    def __init__(self, module):
        self.runner = CommandRunner(module, BINARY)

    @property
    def calls(self):
        return self.runner.calls

    def _run(self, args):
        if not self.runner.available:
            raise BuildxError("docker is not installed on this host (not found on PATH): the builds "
                              "need Docker with the buildx plugin", kind="docker_missing")
        result = self.runner.run(args)
        text = result.stdout + result.stderr
        if result.rc != 0 and NO_BUILDX_RE.search(text):
            raise BuildxError("docker has no buildx plugin: install docker-buildx-plugin "
                              "(Docker's apt repository) or docker-buildx (Debian)", result,
                              kind="buildx_missing")
        daemon = NO_DAEMON_RE.search(text)
        if daemon:
            raise BuildxError("the Docker daemon does not answer (%s): start it (systemctl start "
                              "docker) or point DOCKER_HOST at it" % daemon.group(0).strip(), result,
                              kind="daemon_unreachable")
        return result

    def ls(self):
        result = self._run(["buildx", "ls"])
        if result.rc != 0:
            raise BuildxError("docker buildx ls failed (rc=%d): %s" % (result.rc, result.stderr.strip()),
                              result)
        try:
            builders = parse_ls(result.stdout)
        except ValueError as exc:
            raise BuildxError("unexpected output of docker buildx ls (%s): %r" % (exc, result.stdout[:2000]),
                              result, kind="unparsable")
        return builders

    def inspect(self, name=None):
        """A builder's details; {'name': NAME, 'exists': False} when there is none."""
        args = ["buildx", "inspect"] + (["--", name] if name else [])
        result = self._run(args)
        if result.rc != 0:
            if name and NO_BUILDER_RE.search(result.stderr):
                return {"name": name, "exists": False, "driver": None, "status": None, "error": None,
                        "platforms": [], "nodes": []}
            raise BuildxError("docker %s failed (rc=%d): %s" % (" ".join(args), result.rc, result.stderr.strip()),
                              result)
        try:
            details = parse_inspect(result.stdout)
        except ValueError as exc:
            raise BuildxError("unexpected output of docker %s (%s): %r" % (" ".join(args), exc,
                                                                           result.stdout[:2000]),
                              result, kind="unparsable")
        details["exists"] = True
        return details
