# -*- coding: utf-8 -*-
# Apache-2.0
"""CUDA MPS control (nvidia-cuda-mps-control): the verb table and its client.

Every verb the modules send lives in VERBS: how it is sent (a line on standard
input for the legacy v2 shell, or arguments for the v3 "module verb" syntax)
and the parser of its answer. A syntax change of a driver release is one entry
to change. Entries with "verified": False were inferred (from NVIDIA's MPS v3
documentation, which names the verbs but not every output format); the
stand-in lab/standin/bin/nvidia-cuda-mps-control answers in these inferred
formats. Replace them with output recorded on a real r615+ GPU node
(tests/gpu/run.sh records what it saw).

Unknown or unparsable output raises MpsError quoting the output, never a guess.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import time

from ansible_collections.smshare.kai.plugins.module_utils import csv_output
from ansible_collections.smshare.kai.plugins.module_utils.runner import CommandRunner, ToolError

BINARY = "nvidia-cuda-mps-control"
DEFAULT_PIPE_DIRECTORY = "/tmp/nvidia-mps"
DEFAULT_LOG_DIRECTORY = "/var/log/nvidia-mps"
PID_FILE = "nvidia-cuda-mps-control.pid"
CONTROL_SOCKET = "control"

# Texts the real tool prints (documented / seen in public logs).
NOT_RUNNING_TEXT = "Cannot find MPS control daemon process"
ALREADY_RUNNING_TEXT = "An instance of this daemon is already running"
# (unverified) texts, matched loosely
PERMISSION_DENIED_RE = re.compile(r"permission denied", re.I)
UNKNOWN_SERVER_RE = re.compile(r"server '([^']*)' not found", re.I)


class MpsError(ToolError):
    """A failed or unparsable MPS call."""


# ---------------------------------------------------------------- parsers
def _lines(out):
    return [line.strip() for line in out.splitlines() if line.strip()]


def parse_nothing(out):
    """Setters: the real shell answers nothing, or echoes the value it set."""
    for line in _lines(out):
        if not re.match(r"^\d+(\.\d+)?[KMGT]?$", line):
            raise ValueError("expected no output")
    return None


def parse_pid_list(out):
    pids = []
    for line in _lines(out):
        if not line.isdigit():
            raise ValueError("expected one PID per line")
        pids.append(int(line))
    return pids


def parse_percentage(out):
    lines = _lines(out)
    if len(lines) != 1 or not re.match(r"^\d+(\.\d+)?$", lines[0]):
        raise ValueError("expected one percentage")
    value = float(lines[0])
    if not 0 < value <= 100:
        raise ValueError("percentage out of range")
    return value


SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?$", re.I)
SIZE_FACTORS_MIB = {"": 1.0 / (1 << 20), "K": 1.0 / 1024, "M": 1, "G": 1024, "T": 1 << 20}


def size_to_mib(text):
    """'40G' -> 40960, '512M' -> 512, '0' -> None (no limit). ValueError if malformed.

    A bare number is taken as bytes (as the MPS pinned memory limit syntax does
    without a suffix), except 0 which means no limit.
    """
    match = SIZE_RE.match(str(text).strip())
    if not match:
        raise ValueError("not a memory size: %r (use a number with K, M, G or T)" % (text,))
    value = float(match.group(1)) * SIZE_FACTORS_MIB[match.group(2).upper()]
    return int(value) if value >= 1 else None


def parse_mem_limit(out):
    """(unverified) one size, e.g. 40960M; 0 when no limit is set."""
    lines = _lines(out)
    if len(lines) != 1:
        raise ValueError("expected one memory size")
    return size_to_mib(lines[0])


def parse_server_status(out):
    lines = _lines(out)
    if len(lines) != 1 or not re.match(r"^[A-Z_]+$", lines[0]):
        raise ValueError("expected one status word")
    return lines[0]


def parse_help(out):
    """v3 is there when the help names the protocol option. Tools before r615
    may not know -h at all: whatever they answer, no --protocol means no v3."""
    return "--protocol" in out


def csv_parser(columns, numeric=()):
    """A parser for `--format=csv` output with exactly these header columns."""

    def parse(out):
        rows = []
        for cells in csv_output.parse_csv(out, columns):
            row = dict(zip(columns, cells))
            for key in numeric:
                row[key] = float(row[key]) if "." in row[key] else int(row[key])
            rows.append(row)
        return rows

    return parse


def parse_namespaces(out):
    rows = csv_parser(NAMESPACE_COLUMNS, numeric=("active_thread_percentage", "client_priority"))(out)
    for row in rows:
        row["pinned_memory_limit_mib"] = size_to_mib(row.pop("pinned_memory_limit"))
    return rows


NAMESPACE_COLUMNS = ("namespace", "active_thread_percentage", "pinned_memory_limit", "client_priority")

# ---------------------------------------------------------------- the table
# stdin: the line written to the legacy shell; argv: arguments after the binary.
# {name} placeholders are filled from the call's keyword arguments.
VERBS = {
    # legacy v2 shell, documented (MPS docs "Legacy MPS v2 Interface")
    "get_server_list": {"stdin": "get_server_list", "parse": parse_pid_list, "verified": True},
    "get_server_status": {"stdin": "get_server_status {pid}", "parse": parse_server_status,
                          "verified": False},
    "get_client_list": {"stdin": "get_client_list {pid}", "parse": parse_pid_list, "verified": True},
    "get_default_active_thread_percentage": {
        "stdin": "get_default_active_thread_percentage", "parse": parse_percentage, "verified": True},
    "set_default_active_thread_percentage": {
        "stdin": "set_default_active_thread_percentage {percentage}", "parse": parse_nothing,
        "verified": True},
    "get_default_device_pinned_mem_limit": {
        "stdin": "get_default_device_pinned_mem_limit {device}", "parse": parse_mem_limit,
        "verified": False},  # output format inferred
    "set_default_device_pinned_mem_limit": {
        "stdin": "set_default_device_pinned_mem_limit {device} {limit}", "parse": parse_nothing,
        "verified": True},
    "quit": {"stdin": "quit", "parse": parse_nothing, "verified": True},
    "help": {"argv": ["-h"], "parse": parse_help, "verified": False},
    # MPS v3 module verb syntax (r615+). The seed's query is
    # `namespace list --server=NAME`; `client list --format=csv,noheader` is
    # named in the reference. The --format=csv answers below are (unverified).
    "server_list": {"argv": ["server", "list", "--format=csv"], "protocol": 3,
                    "parse": csv_parser(("name", "pid", "uid", "active_thread_percentage", "status"),
                                        numeric=("pid", "uid", "active_thread_percentage")),
                    "verified": False},
    "namespace_list": {"argv": ["namespace", "list", "--server={server}", "--format=csv"],
                       "protocol": 3, "parse": parse_namespaces, "verified": False},
    "namespace_create": {"argv": ["namespace", "create", "--server={server}", "--name={name}",
                                  "--active-thread-percentage={percentage}"],
                         "protocol": 3, "parse": parse_nothing, "verified": False},
    "namespace_set": {"argv": ["namespace", "set", "--server={server}", "--name={name}",
                               "--active-thread-percentage={percentage}"],
                      "protocol": 3, "parse": parse_nothing, "verified": False},
    "namespace_delete": {"argv": ["namespace", "delete", "--server={server}", "--name={name}"],
                         "protocol": 3, "parse": parse_nothing, "verified": False},
    "client_list": {"argv": ["client", "list", "--format=csv"], "protocol": 3,
                    "parse": csv_parser(("pid", "server", "namespace", "uid", "device")),
                    "verified": False},
}


def unverified_verbs():
    return sorted(name for name, verb in VERBS.items() if not verb["verified"])


# ---------------------------------------------------------------- daemon process
def read_proc_list(path):
    try:
        with open(path, "rb") as handle:
            return [p.decode("utf-8", "replace") for p in handle.read().split(b"\0") if p]
    except (IOError, OSError):
        return None


def daemon_flags(cmdline, environ):
    """Protocol, multi-user mode and config file from a daemon's argv and env."""
    args = []
    for index, arg in enumerate(cmdline):
        if os.path.basename(arg) == BINARY:
            args = cmdline[index + 1:]
            break
    flags = {"protocol": 2, "multiuser": False, "config_file": None, "foreground": False}
    iterator = iter(args)
    for arg in iterator:
        if arg in ("-p", "--protocol"):
            flags["protocol"] = int(next(iterator, "2") or 2)
        elif arg.startswith("--protocol="):
            flags["protocol"] = int(arg.split("=", 1)[1])
        elif arg in ("-m", "--multiuser"):
            flags["multiuser"] = True
        elif arg in ("-a", "--apply"):
            flags["config_file"] = next(iterator, None)
        elif arg.startswith("--apply="):
            flags["config_file"] = arg.split("=", 1)[1]
        elif arg in ("-f", "--foreground"):
            flags["foreground"] = True
    for item in environ or []:
        if item.startswith("CUDA_MPS_PROTOCOL_VERSION=") and item.split("=", 1)[1] in ("2", "3"):
            flags["protocol"] = int(item.split("=", 1)[1])
    return flags


def find_daemon(pipe_directory, proc_root="/proc"):
    """The control daemon serving pipe_directory, from its pid file and /proc."""
    found = {"running": False, "pid": None, "protocol": None, "multiuser": None,
             "config_file": None, "stale_pid_file": False}
    try:
        with open(os.path.join(pipe_directory, PID_FILE)) as handle:
            pid = int(handle.read().strip())
    except (IOError, OSError, ValueError):
        return found
    cmdline = read_proc_list(os.path.join(proc_root, str(pid), "cmdline"))
    if not cmdline or not any(os.path.basename(a) == BINARY for a in cmdline[:3]):
        found["stale_pid_file"] = True
        return found
    environ = read_proc_list(os.path.join(proc_root, str(pid), "environ"))
    found.update(daemon_flags(cmdline, environ))
    found.update({"running": True, "pid": pid})
    return found


# ---------------------------------------------------------------- client
class MpsControl:
    """Talks to one control daemon (the one of pipe_directory)."""

    def __init__(self, module, pipe_directory=DEFAULT_PIPE_DIRECTORY,
                 log_directory=DEFAULT_LOG_DIRECTORY, proc_root="/proc"):
        self.module = module
        self.pipe_directory = pipe_directory
        self.log_directory = log_directory
        self.proc_root = proc_root
        self.runner = CommandRunner(module, BINARY, env={
            "CUDA_MPS_PIPE_DIRECTORY": pipe_directory,
            "CUDA_MPS_LOG_DIRECTORY": log_directory,
        })

    @property
    def available(self):
        return self.runner.available

    @staticmethod
    def render(verb_name, **params):
        verb = VERBS[verb_name]
        stdin = verb.get("stdin")
        return ([part.format(**params) for part in verb.get("argv", [])],
                stdin.format(**params) + "\n" if stdin else None)

    def command(self, verb_name, **params):
        """What a call would send, for check mode."""
        args, stdin = self.render(verb_name, **params)
        return self.runner.command(args, stdin=stdin)

    def call(self, verb_name, **params):
        """Send one verb and return its parsed answer."""
        args, stdin = self.render(verb_name, **params)
        if stdin is None and not args:
            raise MpsError("verb %s has neither argv nor stdin" % verb_name)
        if not self.runner.available:
            raise MpsError("%s is not installed: install the NVIDIA driver's compute utilities "
                           "(it ships with the driver, e.g. nvidia-compute-utils-615)" % BINARY,
                           kind="missing")
        result = self.runner.run(args, stdin=stdin)
        return self.check(verb_name, result)

    def check(self, verb_name, result):
        text = result.stdout + result.stderr
        if NOT_RUNNING_TEXT in text:
            if PERMISSION_DENIED_RE.search(text):
                raise MpsError("permission denied on the MPS pipe directory %s: run as root or give "
                               "this user access to it" % self.pipe_directory, result,
                               kind="permission_denied")
            raise MpsError("no MPS control daemon is running for pipe directory %s"
                           % self.pipe_directory, result, kind="not_running")
        if PERMISSION_DENIED_RE.search(text):
            raise MpsError("permission denied on the MPS pipe directory %s: run as root or give "
                           "this user access to it" % self.pipe_directory, result,
                           kind="permission_denied")
        server = UNKNOWN_SERVER_RE.search(text)
        if server:
            raise MpsError("unknown MPS server %r" % server.group(1), result, kind="unknown_server")
        if result.rc != 0 and verb_name != "help":
            raise MpsError("%s failed (rc=%d): %s" % (verb_name, result.rc, text.strip()), result)
        out = result.stdout + result.stderr if verb_name == "help" else result.stdout
        try:
            return VERBS[verb_name]["parse"](out)
        except ValueError as exc:
            raise MpsError("unexpected output of %s (%s): %r" % (verb_name, exc, result.stdout),
                           result, kind="unparsable")

    # -- the daemon
    def daemon(self):
        return find_daemon(self.pipe_directory, self.proc_root)

    def v3_supported(self):
        return self.call("help")

    def start_args(self, protocol, multiuser, config_file):
        args = ["-d"]
        if protocol == 3:
            args += ["-p", "3"]
        if multiuser:
            args.append("-m")
        if config_file:
            args += ["-a", config_file]
        return args

    def start_env(self, protocol):
        # The variable wins over -p: pin it so an inherited value cannot flip it.
        return {"CUDA_MPS_PROTOCOL_VERSION": str(protocol)}

    def start_command(self, protocol, multiuser, config_file):
        return self.runner.command(self.start_args(protocol, multiuser, config_file),
                                   env=self.start_env(protocol))

    def start(self, protocol, multiuser, config_file, timeout=30):
        result = self.runner.run(self.start_args(protocol, multiuser, config_file),
                                 env=self.start_env(protocol))
        if result.rc != 0 or ALREADY_RUNNING_TEXT in result.stdout + result.stderr:
            raise MpsError("starting the MPS control daemon failed (rc=%d): %s"
                           % (result.rc, (result.stdout + result.stderr).strip()), result,
                           kind="start_failed")
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.daemon()["running"] and os.path.exists(
                    os.path.join(self.pipe_directory, CONTROL_SOCKET)):
                return result
            time.sleep(0.1)
        raise MpsError("the MPS control daemon did not come up within %ds (see %s/control.log)"
                       % (timeout, self.log_directory), result, kind="start_failed")

    def stop(self, timeout=30):
        pid = self.daemon()["pid"]
        self.call("quit")
        deadline = time.time() + timeout
        while time.time() < deadline:
            if not self.daemon()["running"] and (pid is None or not os.path.exists(
                    os.path.join(self.proc_root, str(pid)))):
                return
            time.sleep(0.1)
        raise MpsError("the MPS control daemon (pid %s) was still running %ds after quit: "
                       "are clients still attached?" % (pid, timeout), kind="stop_failed")

    # -- reading state
    def read_state(self, devices=(), servers=None, clients=True, named_servers=True):
        """Everything mps_info reports. `servers`: names whose namespaces to list
        (None: all named servers under v3); named_servers=False skips the v3
        server and namespace verbs."""
        daemon = self.daemon()
        state = {
            "pipe_directory": self.pipe_directory,
            "log_directory": self.log_directory,
            "running": daemon["running"],
            "pid": daemon["pid"],
            "protocol": daemon["protocol"],
            "multiuser": daemon["multiuser"],
            "config_file": daemon["config_file"],
            "server_pids": [],
            "servers": [],
            "default_active_thread_percentage": None,
            "default_pinned_mem_limits": {},
            "namespaces": {},
            "clients": [],
        }
        if not daemon["running"]:
            return state
        state["server_pids"] = self.call("get_server_list")
        state["default_active_thread_percentage"] = self.call("get_default_active_thread_percentage")
        for device in devices:
            state["default_pinned_mem_limits"][str(device)] = self.call(
                "get_default_device_pinned_mem_limit", device=device)
        if daemon["protocol"] == 3 and named_servers:
            state["servers"] = self.call("server_list")
            names = [s["name"] for s in state["servers"]] if servers is None else servers
            for name in names:
                state["namespaces"][name] = self.call("namespace_list", server=name)
            if clients:
                state["clients"] = self.call("client_list")
        elif clients and daemon["protocol"] != 3:
            for pid in state["server_pids"]:
                state["clients"] += [{"pid": c, "server_pid": pid}
                                     for c in self.call("get_client_list", pid=pid)]
        return state


# ---------------------------------------------------------------- config file
def config_file_servers(text):
    """Servers and namespaces a v3 TOML config declares, from its section
    headers and simple `key = value` lines (enough to predict and validate;
    the daemon itself is the authority)."""
    servers = {}
    current = None
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        header = re.match(r"^\[\s*servers\.([A-Za-z0-9_-]+)(?:\.namespaces\.([A-Za-z0-9_-]+))?\s*\]$",
                          line)
        if header:
            server = servers.setdefault(header.group(1), {"active_thread_percentage": 100.0,
                                                          "namespaces": {}})
            if header.group(2):
                current = server["namespaces"].setdefault(header.group(2), {})
            else:
                current = server
            continue
        if line.startswith("["):
            current = None
            continue
        pair = re.match(r'^([A-Za-z_]+)\s*=\s*"?([^"]*)"?$', line)
        if current is not None and pair and pair.group(1) == "active_thread_percentage":
            current["active_thread_percentage"] = float(pair.group(2))
    for server in servers.values():
        server["namespaces"].setdefault("default", {})
        for namespace in server["namespaces"].values():
            namespace.setdefault("active_thread_percentage", server["active_thread_percentage"])
    return servers
