# -*- coding: utf-8 -*-
# Apache-2.0
"""CUDA MPS control (nvidia-cuda-mps-control): its defaults, input rules, verb
table, daemon probe and client, for smshare.kai.mps_info and mps_control.

Every verb the modules send lives in VERBS: how it is sent (a line on standard
input of the legacy v2 shell, or arguments for the MPS v3 "module verb"
syntax) and the parser of its answer. A syntax change of a driver release is
one entry to change. Entries with "verified": False were inferred (NVIDIA's MPS
v3 documentation names the verbs but not every output format); the stand-in
lab/standin/bin/nvidia-cuda-mps-control answers in these inferred formats.
Replace them with output recorded on a real r615+ GPU node (tests/gpu/run.sh
records what it saw).

Unknown or unparsable output raises MpsError quoting the output, never a guess.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import time

from ansible_collections.smshare.kai.plugins.module_utils import csv_output, validate
from ansible_collections.smshare.kai.plugins.module_utils.runner import CommandRunner, ToolError

BINARY = "nvidia-cuda-mps-control"
MISSING = "nvidia_cuda_mps_control_missing"  # the failure when it is not installed (runner's <binary>_missing)

# ---------------------------------------------------------------- defaults
# The only place these are written (plugins/doc_fragments/mps.py documents them;
# a unit test keeps the two equal).
DEFAULT_PIPE_DIRECTORY = "/tmp/nvidia-mps"   # the tool's own defaults
DEFAULT_LOG_DIRECTORY = "/var/log/nvidia-mps"
DEFAULT_DIRECTORY_MODE = 0o755               # a directory the module creates without a mode asked for
DEFAULT_TIMEOUT = 30
MAX_TIMEOUT = 3600
PID_FILE = "nvidia-cuda-mps-control.pid"
CONTROL_SOCKET = "control"

# The options every MPS module takes.
ARGUMENT_SPEC = dict(
    pipe_directory=dict(type="path", default=DEFAULT_PIPE_DIRECTORY),
    log_directory=dict(type="path", default=DEFAULT_LOG_DIRECTORY),
)

# Texts the real tool prints (documented / seen in public logs).
NOT_RUNNING_TEXT = "Cannot find MPS control daemon process"
ALREADY_RUNNING_TEXT = "An instance of this daemon is already running"
# (unverified) texts, matched loosely
PERMISSION_DENIED_RE = re.compile(r"permission denied", re.I)
UNKNOWN_SERVER_RE = re.compile(r"server '([^']*)' not found", re.I)
INVALID_DEVICE_RE = re.compile(r"invalid device", re.I)
DAEMON_NOT_V3_RE = re.compile(r"requires protocol 3", re.I)


class MpsError(ToolError):
    """A failed or unparsable MPS call, or a refusal before any call."""


# ---------------------------------------------------------------- input rules
# Server names are TOML keys of the daemon's configuration ([servers.NAME]).
SERVER_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_-]*"
# Namespace names also become a directory under the server's pipe directory.
NAMESPACE_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]*"
NAME_MAX_LENGTH = 253


def name(parameter, value, example, pattern):
    """A server or namespace name: it reaches the tool's argv and comes back in
    its CSV answers, so no control characters, no leading '-' and no comma."""
    validate.text(parameter, value, example, positional=True, max_length=NAME_MAX_LENGTH)
    if "," in value:
        raise validate.BadInput(parameter, value, "must not contain ',' (it would break the CSV the tool "
                                "answers with)", example)
    return validate.text(parameter, value, example, pattern=pattern,
                         rule="must be letters, digits%s, '_' and '-', starting with a letter or digit"
                         % (", '.'" if "." in pattern else ""))


def server_name(parameter, value):
    return name(parameter, value, "shared", SERVER_PATTERN)


def namespace_name(parameter, value):
    return name(parameter, value, "pod-a", NAMESPACE_PATTERN)


def percentage(parameter, value):
    return validate.integer(parameter, value, "50", minimum=1, maximum=100)


def gpu_index(parameter, value):
    """A GPU index, as an int or a string of digits (dict keys are strings)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return validate.integer(parameter, value, "0", minimum=0, maximum=1023)
    validate.text(parameter, value, "0", pattern=r"[0-9]{1,4}", rule="must be a GPU index (0, 1, ...)")
    return validate.integer(parameter, int(value), "0", minimum=0, maximum=1023)


def timeout(parameter, value):
    return validate.integer(parameter, value, str(DEFAULT_TIMEOUT), minimum=1, maximum=MAX_TIMEOUT)


# Memory sizes: MPS reads K, M, G and T as powers of 1024 (40G = 40960M).
SIZE_RE = re.compile(r"(\d+(?:\.\d+)?)([KMGT])(?:iB)?", re.I)
SIZE_FACTORS_MIB = {"K": 1.0 / 1024, "M": 1, "G": 1024, "T": 1 << 20}
SIZE_RULE = "must be a whole number of MiB written with the unit K, M, G or T (40G = 40960M), or 0 for no limit"


def size_to_mib(text):
    """'40G' -> 40960, '512M' -> 512, '0' -> None (no limit). ValueError for
    anything else: a bare number, an unknown unit ('GB', 'X'), less than 1M or
    not a whole number of MiB."""
    text = str(text)
    if text == "0":
        return None
    match = SIZE_RE.fullmatch(text)
    if not match:
        raise ValueError("not a memory size: %r" % (text,))
    mib = float(match.group(1)) * SIZE_FACTORS_MIB[match.group(2).upper()]
    if mib < 1 or mib != int(mib):
        raise ValueError("not a whole number of MiB: %r" % (text,))
    return int(mib)


def memory_size(parameter, value):
    """A pinned memory limit from the user: its size in MiB (None: no limit)."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # YAML's 0
    validate.text(parameter, value, "40G")
    try:
        return size_to_mib(value)
    except ValueError:
        raise validate.BadInput(parameter, value, SIZE_RULE, "40G")


# ---------------------------------------------------------------- parsers
def _lines(out):
    return [line.strip() for line in out.splitlines() if line.strip()]


def parse_nothing(out):
    """Setters: the real shell answers nothing, or echoes the value it set."""
    for line in _lines(out):
        if not re.fullmatch(r"\d+(\.\d+)?[KMGT]?", line):
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
    if len(lines) != 1 or not re.fullmatch(r"\d+(\.\d+)?", lines[0]):
        raise ValueError("expected one percentage")
    value = float(lines[0])
    if not 0 < value <= 100:
        raise ValueError("percentage out of range")
    return value


def parse_mem_limit(out):
    """(unverified) one size, e.g. 40960M; 0 when no limit is set."""
    lines = _lines(out)
    if len(lines) != 1:
        raise ValueError("expected one memory size")
    return size_to_mib(lines[0])


def parse_server_status(out):
    lines = _lines(out)
    if len(lines) != 1 or not re.fullmatch(r"[A-Z_]+", lines[0]):
        raise ValueError("expected one status word")
    return lines[0]


def parse_help(out):
    """v3 is there when the help names the protocol option. Tools before r615
    may not know -h at all: whatever they answer, no --protocol means no v3."""
    return "--protocol" in out


def _number(text):
    return float(text) if "." in text else int(text)


def csv_parser(columns, numeric=()):
    """A parser for `--format=csv` output with exactly these header columns."""

    def parse(out):
        rows = []
        for cells in csv_output.parse_csv(out, columns):
            row = dict(zip(columns, cells))
            for key in numeric:
                row[key] = _number(row[key])
            rows.append(row)
        return rows

    return parse


NAMESPACE_COLUMNS = ("namespace", "active_thread_percentage", "pinned_memory_limit", "client_priority")


def _namespace_rows(rows):
    for row in rows:
        row["active_thread_percentage"] = _number(row["active_thread_percentage"])
        row["client_priority"] = int(row["client_priority"])
        row["pinned_memory_limit_mib"] = size_to_mib(row.pop("pinned_memory_limit"))
    return rows


def parse_namespaces(out):
    """`namespace list --format=csv`, the form the modules read."""
    return _namespace_rows(csv_parser(NAMESPACE_COLUMNS)(out))


def parse_namespace_table(out):
    """The guide's `namespace list --server=NAME` as a person reads it: a header
    of the upper-case column names, then one row per namespace, columns
    separated by blanks. (unverified) format, the stand-in's."""
    lines = _lines(out)
    if not lines or lines[0].split() != [c.upper() for c in NAMESPACE_COLUMNS]:
        raise ValueError("expected the header %s" % "  ".join(c.upper() for c in NAMESPACE_COLUMNS))
    rows = []
    for line in lines[1:]:
        cells = line.split()
        if len(cells) != len(NAMESPACE_COLUMNS):
            raise ValueError("row with %d columns instead of %d: %r" % (len(cells), len(NAMESPACE_COLUMNS), line))
        rows.append(dict(zip(NAMESPACE_COLUMNS, cells)))
    return _namespace_rows(rows)


# ---------------------------------------------------------------- the table
# stdin: the line written to the legacy shell of a client started without
# options; argv: the arguments after the binary. {name} placeholders are filled
# from the call's keyword arguments (checked by the modules before: no control
# characters, no comma, no leading '-').
#
# MPS v3 verbs are sent as the guide sends its query
# (`nvidia-cuda-mps-control -p 3 namespace list --server=shared`): -p 3 first,
# then the module and the verb; CUDA_MPS_PROTOCOL_VERSION=3 is set too, so an
# inherited value cannot contradict the -p. What the real tool does with a v3
# verb WITHOUT -p 3 is (unverified): a protocol 2 client may refuse the words,
# or ignore them and read commands from standard input, then do nothing and
# print nothing, which a setter would take for success. The stand-in refuses
# (rc 1, "not a command of protocol 2"): a missing -p 3 then fails loudly in
# tests instead of passing silently. The legacy verbs stay on standard input
# without -p, as before MPS v3; whether a protocol 3 daemon keeps answering them
# is (unverified): the stand-in does.
V3 = ["-p", "3"]
V3_ENV = {"CUDA_MPS_PROTOCOL_VERSION": "3"}

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
    # {limit} is always sent as <MiB>M, the form NVIDIA's device plugin sends
    "set_default_device_pinned_mem_limit": {
        "stdin": "set_default_device_pinned_mem_limit {device} {limit}", "parse": parse_nothing,
        "verified": True},
    "quit": {"stdin": "quit", "parse": parse_nothing, "verified": True},
    "help": {"argv": ["-h"], "parse": parse_help, "verified": False},
    # MPS v3 module verbs (r615+): the guide's query and the reference's
    # `client list --format=csv`; every --format=csv answer is (unverified).
    "server_list": {"argv": V3 + ["server", "list", "--format=csv"], "protocol": 3,
                    "parse": csv_parser(("name", "pid", "uid", "active_thread_percentage", "status"),
                                        numeric=("pid", "uid", "active_thread_percentage")),
                    "verified": False},
    "namespace_list": {"argv": V3 + ["namespace", "list", "--server={server}", "--format=csv"],
                       "protocol": 3, "parse": parse_namespaces, "verified": False},
    # the guide's own query, word for word, for readers of its table (the smoke test)
    "namespace_list_table": {"argv": V3 + ["namespace", "list", "--server={server}"],
                             "protocol": 3, "parse": parse_namespace_table, "verified": False},
    "namespace_create": {"argv": V3 + ["namespace", "create", "--server={server}", "--name={name}",
                                       "--active-thread-percentage={percentage}"],
                         "protocol": 3, "parse": parse_nothing, "verified": False},
    "namespace_set": {"argv": V3 + ["namespace", "set", "--server={server}", "--name={name}",
                                    "--active-thread-percentage={percentage}"],
                      "protocol": 3, "parse": parse_nothing, "verified": False},
    "namespace_delete": {"argv": V3 + ["namespace", "delete", "--server={server}", "--name={name}"],
                         "protocol": 3, "parse": parse_nothing, "verified": False},
    "client_list": {"argv": V3 + ["client", "list", "--format=csv"], "protocol": 3,
                    "parse": csv_parser(("pid", "server", "namespace", "uid", "device")),
                    "verified": False},
}


def render(verb_name, **params):
    """(argv after the binary, stdin, environment overrides) of one verb."""
    verb = VERBS[verb_name]
    stdin = verb.get("stdin")
    args = [part.format(**params) for part in verb.get("argv", [])]
    stdin = stdin.format(**params) + "\n" if stdin else None
    if any(validate.has_control(part) for part in args) or stdin and validate.has_control(stdin[:-1]):
        raise MpsError("refusing to send %s with a control character or line break in %r"
                       % (verb_name, params), kind="bad_input")
    return args, stdin, dict(V3_ENV) if verb.get("protocol") == 3 else {}


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
    flags = {"protocol": 2, "multiuser": False, "config_file": None}
    iterator = iter(args)
    for arg in iterator:
        if arg in ("-p", "--protocol"):
            value = next(iterator, "2")
            flags["protocol"] = int(value) if value in ("2", "3") else 2
        elif arg.startswith("--protocol="):
            flags["protocol"] = 3 if arg.split("=", 1)[1] == "3" else 2
        elif arg in ("-m", "--multiuser"):
            flags["multiuser"] = True
        elif arg in ("-a", "--apply"):
            flags["config_file"] = next(iterator, None)
        elif arg.startswith("--apply="):
            flags["config_file"] = arg.split("=", 1)[1]
    for item in environ or []:
        if item.startswith("CUDA_MPS_PROTOCOL_VERSION=") and item.split("=", 1)[1] in ("2", "3"):
            flags["protocol"] = int(item.split("=", 1)[1])
    return flags


NOT_RUNNING = {"running": False, "pid": None, "protocol": None, "multiuser": None,
               "config_file": None, "stale_pid_file": False}


def find_daemon(pipe_directory, proc_root="/proc"):
    """The control daemon serving pipe_directory, from its pid file and /proc."""
    found = dict(NOT_RUNNING)
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


def start_args(protocol, multiuser, config_file):
    """The daemon's argv after the binary (mpsd: -p 3 -m -f -a <toml>; we use -d)."""
    args = ["-d"]
    if protocol == 3:
        args += ["-p", "3"]
    if multiuser:
        args.append("-m")
    if config_file:
        args += ["-a", config_file]
    return args


def start_env(protocol):
    # The variable wins over -p: pin it so an inherited value cannot flip it.
    return {"CUDA_MPS_PROTOCOL_VERSION": str(protocol)}


# ---------------------------------------------------------------- client
class MpsControl:
    """Talks to one control daemon (the one of pipe_directory)."""

    def __init__(self, module, pipe_directory=DEFAULT_PIPE_DIRECTORY,
                 log_directory=DEFAULT_LOG_DIRECTORY):
        self.module = module
        self.pipe_directory = pipe_directory
        self.log_directory = log_directory
        self.runner = CommandRunner(module, BINARY, env={
            "CUDA_MPS_PIPE_DIRECTORY": pipe_directory,
            "CUDA_MPS_LOG_DIRECTORY": log_directory,
        })

    @property
    def available(self):
        return self.runner.available

    def missing(self):
        return self.runner.missing("install the NVIDIA driver's compute utilities (it ships with the "
                                   "driver, e.g. nvidia-compute-utils-615)")

    # -- commands, as records (check mode) or run
    def command(self, verb_name, **params):
        """What a call sends: cmd, stdin, env."""
        args, stdin, env = render(verb_name, **params)
        return self.runner.command(args, stdin=stdin, env=env)

    def call(self, verb_name, **params):
        """Send one verb and return its parsed answer."""
        args, stdin, env = render(verb_name, **params)
        if not self.runner.available:
            raise self.missing()
        return self.check(verb_name, self.runner.run(args, stdin=stdin, env=env))

    def check(self, verb_name, result):
        text = result.stdout + result.stderr
        if PERMISSION_DENIED_RE.search(text):
            raise MpsError("permission denied on the MPS pipe directory %s: run as root or give "
                           "this user access to it" % self.pipe_directory, result,
                           kind="permission_denied")
        if NOT_RUNNING_TEXT in text:
            raise MpsError("no MPS control daemon is running for pipe directory %s"
                           % self.pipe_directory, result, kind="not_running")
        server = UNKNOWN_SERVER_RE.search(text)
        if server:
            raise MpsError("unknown MPS server %r" % server.group(1), result, kind="unknown_server")
        if INVALID_DEVICE_RE.search(text):
            raise MpsError("the MPS daemon has no GPU with that index (%s): GPU indexes count from 0"
                           % text.strip(), result, kind="unknown_gpu")
        if DAEMON_NOT_V3_RE.search(text):
            raise MpsError("the MPS control daemon for %s does not run MPS v3 (protocol 3): %s"
                           % (self.pipe_directory, text.strip()), result, kind="daemon_not_v3")
        if result.rc != 0 and verb_name != "help":
            raise MpsError("%s failed (rc=%d): %s" % (verb_name, result.rc, text.strip()), result)
        out = text if verb_name == "help" else result.stdout
        try:
            return VERBS[verb_name]["parse"](out)
        except ValueError as exc:
            raise MpsError("unexpected output of %s (%s): %r" % (verb_name, exc, result.stdout),
                           result, kind="unparsable")

    # -- the daemon
    def daemon(self):
        return find_daemon(self.pipe_directory)

    def v3_supported(self):
        return self.call("help")

    def start_command(self, protocol, multiuser, config_file):
        return self.runner.command(start_args(protocol, multiuser, config_file), env=start_env(protocol))

    def start(self, protocol, multiuser, config_file, timeout=DEFAULT_TIMEOUT):
        result = self.runner.run(start_args(protocol, multiuser, config_file), env=start_env(protocol))
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

    def stop(self, timeout=DEFAULT_TIMEOUT):
        pid = self.daemon()["pid"]
        self.call("quit")
        deadline = time.time() + timeout
        while time.time() < deadline:
            if not self.daemon()["running"] and (pid is None or not os.path.exists("/proc/%s" % pid)):
                return
            time.sleep(0.1)
        raise MpsError("the MPS control daemon (pid %s) was still running %ds after quit: "
                       "are clients still attached?" % (pid, timeout), kind="stop_failed")

    # -- reading state
    def read_state(self, devices=(), servers=None, clients=True, named_servers=True):
        """Everything mps_info reports. devices: GPU indexes whose default pinned
        memory limit to read. Under v3 (named_servers): the server list, and the
        namespaces of `servers` (None: of every server; names the daemon does not
        have are left out: callers name them). clients: the client list."""
        daemon = self.daemon()
        state = {
            "pipe_directory": self.pipe_directory,
            "log_directory": self.log_directory,
            "running": daemon["running"],
            "pid": daemon["pid"],
            "protocol": daemon["protocol"],
            "multiuser": daemon["multiuser"],
            "config_file": daemon["config_file"],
            "stale_pid_file": daemon["stale_pid_file"],
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
            known = [s["name"] for s in state["servers"]]
            for server in known if servers is None else [s for s in servers if s in known]:
                state["namespaces"][server] = self.call("namespace_list", server=server)
            if clients:
                state["clients"] = self.call("client_list")
        elif clients and daemon["protocol"] != 3:
            for pid in state["server_pids"]:
                state["clients"] += [{"pid": c, "server_pid": pid}
                                     for c in self.call("get_client_list", pid=pid)]
        return state


# ---------------------------------------------------------------- config file
TOML_KEY = r'(?:[A-Za-z0-9_-]+|"[A-Za-z0-9_.-]+")'
CONFIG_HEADER_RE = re.compile(r"\[\s*servers\.(%s)(?:\.namespaces\.(%s))?\s*\]" % (TOML_KEY, TOML_KEY))


def config_file_servers(text):
    """Servers and namespaces a v3 TOML config declares, each namespace with
    its active thread percentage, from the section headers and simple
    `key = value` lines: what a daemon started with this file has (the daemon
    itself stays the authority: the module reads it back after a start)."""
    servers = {}
    current = None
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        header = CONFIG_HEADER_RE.fullmatch(line)
        if header:
            server = servers.setdefault(header.group(1).strip('"'), {"active_thread_percentage": 100.0,
                                                                     "namespaces": {}})
            if header.group(2):
                current = server["namespaces"].setdefault(header.group(2).strip('"'), {})
            else:
                current = server
            continue
        if line.startswith("["):
            current = None
            continue
        pair = re.fullmatch(r'([A-Za-z_]+)\s*=\s*"?([0-9.]+)"?', line)
        if current is not None and pair and pair.group(1) == "active_thread_percentage":
            current["active_thread_percentage"] = float(pair.group(2))
    for server in servers.values():
        server["namespaces"].setdefault("default", {})
        for namespace in server["namespaces"].values():
            namespace.setdefault("active_thread_percentage", server["active_thread_percentage"])
    return servers
