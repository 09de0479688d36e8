# -*- coding: utf-8 -*-
# Apache-2.0
"""CUDA MPS control (nvidia-cuda-mps-control): its defaults, input rules, verb
table, daemon probe and client, for smshare.kai.mps_info and mps_control.

Every verb the modules send lives in VERBS: how it is sent (a line on standard
input of the legacy v2 shell, or arguments for the MPS v3 "module verb"
syntax), the parser of its answer, and where that was learnt. `verified` holds
the source (repository, path, commit) of a verb's argv; `output` says what is
known of its answer. The v3 verbs are those the gpu-fractioning fork's mpsd
sends to the r615 daemon (FORK_MPSCTL); where no source shows the real output
the parser accepts the shapes the sources allow and fails naming the line it
could not read, never a guess. tests/gpu/run.sh records the real answers on a
GPU node (ROADMAP item 1) to settle what is still open here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import os
import re
import time

from ansible_collections.smshare.kai.plugins.module_utils import validate
from ansible_collections.smshare.kai.plugins.module_utils.runner import CommandRunner, ToolError

BINARY = "nvidia-cuda-mps-control"
MISSING = "nvidia_cuda_mps_control_missing"  # the failure when it is not installed (runner's <binary>_missing)

# Where the verbs and rules come from (cited by VERBS and the rules below).
FORK_MPSCTL = ("kai-scheduler/gpu-fractioning fractioning-manager/mpsd/internal/mpsctl/control.go "
               "@ 9abe6fd424a5cd0ba21d3dd7f78ac75a781fddfa")
FORK_CLIENT_LIST = ("kai-scheduler/gpu-fractioning fractioning-manager/mpsd/internal/mpsctl/control_test.go "
                    "@ 1cb2b23db621166ee778db94571c5c7659ec9959 (output captured on driver 615)")
FORK_MPSNS = ("kai-scheduler/gpu-fractioning fractioning-manager/mpsd/internal/mpsns/name.go "
              "@ ad0bc5749e5a9acc21a153e265b00e913780af6c")
DEVICE_PLUGIN_MPS = ("NVIDIA/k8s-device-plugin cmd/mps-control-daemon/mps/daemon.go "
                     "@ 05d317d5f6fe253deffe3386395daae1ab6a3e9f")
GUIDE = "the published guide 'Build the KAI-Scheduler and GPU Fractioning Forks' (tables)"

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
# A namespace's pipe directory holds its sockets: a unix socket path has 107
# usable bytes, and the fork keeps 24 of them for the socket names. Longer, the
# daemon fails with a bare "Failed to initialize MPS control daemon" and no
# log (FORK_MPSNS: MaxPipeDirLength, measured on driver 615).
MAX_PIPE_DIRECTORY_LENGTH = 83
# The v3 verbs the guide's prerequisite check wants `namespace --help` to list.
NAMESPACE_VERBS = ("create", "delete", "get", "list", "set")

# The options every MPS module takes.
ARGUMENT_SPEC = dict(
    pipe_directory=dict(type="path", default=DEFAULT_PIPE_DIRECTORY),
    log_directory=dict(type="path", default=DEFAULT_LOG_DIRECTORY),
)

# Texts the real tool prints (documented / seen in public logs).
NOT_RUNNING_TEXT = "Cannot find MPS control daemon process"
ALREADY_RUNNING_TEXT = "An instance of this daemon is already running"
INIT_FAILED_TEXT = "Failed to initialize MPS control daemon"   # FORK_MPSNS
# The fork's mpsd doc quotes the daemon's refusal of a non-owner (FORK_MPSNS's manager.go).
INSUFFICIENT_PRIVILEGES_RE = re.compile(r"Insufficient privileges for UID (\d+)")
# (unverified) texts, matched loosely
PERMISSION_DENIED_RE = re.compile(r"permission denied", re.I)
UNKNOWN_SERVER_RE = re.compile(r"server '([^']*)' not found", re.I)
UNKNOWN_NAMESPACE_RE = re.compile(r"namespace '([^']*)' (?:does not exist|not found)", re.I)
NAMESPACE_BUSY_RE = re.compile(r"attached client|active client|in use", re.I)
INVALID_DEVICE_RE = re.compile(r"invalid device", re.I)
DAEMON_NOT_V3_RE = re.compile(r"requires protocol 3", re.I)


class MpsError(ToolError):
    """A failed or unparsable MPS call, or a refusal before any call."""


# ---------------------------------------------------------------- input rules
# Server names are TOML keys of the daemon's configuration ([servers.NAME]).
SERVER_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_-]*"
# The daemon accepts only these (FORK_MPSCTL: "lowercase letters, digits and
# underscores only. No uppercase and no hyphens").
NAMESPACE_PATTERN = r"[a-z0-9_]+"
NAME_MAX_LENGTH = MAX_PIPE_DIRECTORY_LENGTH


def server_name(parameter, value):
    """A server name: it reaches the tool's argv and the pipe directory's path."""
    validate.text(parameter, value, "shared", positional=True, max_length=NAME_MAX_LENGTH)
    return validate.text(parameter, value, "shared", pattern=SERVER_PATTERN,
                         rule="must be letters, digits, '_' and '-', starting with a letter or digit")


def namespace_name(parameter, value):
    """A namespace name as the r615 daemon accepts it."""
    validate.text(parameter, value, "pod_a", positional=True, max_length=NAME_MAX_LENGTH)
    return validate.text(parameter, value, "pod_a", pattern=NAMESPACE_PATTERN,
                         rule="must be lower-case letters, digits and '_' only (the MPS v3 daemon refuses "
                              "anything else: no capitals, '-' or '.')")


def namespace_pipe_directory(pipe_directory, server, name):
    """Where the daemon puts a namespace (the layout the fork's mpsd finds; the
    module reads the real one back with `namespace get`)."""
    return "%s/%s/%s" % (pipe_directory.rstrip("/"), server, name)


def pipe_directory_fits(parameter, value, path):
    """Refuse a pipe directory the daemon could not put a socket in."""
    if len(path) > MAX_PIPE_DIRECTORY_LENGTH:
        raise validate.BadInput(parameter, value, "makes the MPS pipe directory %s %d characters long, over the "
                                "%d the daemon can hold (a unix socket path is at most 107 bytes; longer, the "
                                "daemon fails with no log at all): shorten the name or the pipe directory"
                                % (path, len(path), MAX_PIPE_DIRECTORY_LENGTH))
    return path


# The namespaces the fork's mpsd makes, one per container (FORK_MPSNS).
FORK_NAMESPACE_PREFIX = "kai_"


def fork_namespace_name(container_id):
    """The name the fork's mpsd gives the namespace of a container: `kai_`, the
    container ID with a-z and 0-9 kept, A-Z lower-cased and anything else `_`,
    cut to 16 characters, `_`, then the first 20 hex digits of the SHA-256 of
    the whole ID (FORK_MPSNS). The ID is the runtime's (NRI's), as a pod's
    status shows it after `containerd://`."""
    if not container_id or not container_id.strip():
        raise ValueError("deriving an MPS namespace name: container id is empty")
    kept = []
    for char in container_id:
        if len(kept) >= 16:
            break
        if "a" <= char <= "z" or "0" <= char <= "9":
            kept.append(char)
        elif "A" <= char <= "Z":
            kept.append(char.lower())
        else:
            kept.append("_")
    digest = hashlib.sha256(container_id.encode("utf-8")).hexdigest()[:20]
    return FORK_NAMESPACE_PREFIX + "".join(kept) + "_" + digest


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
# What a namespace list shows for "no pinned memory limit" (GUIDE: check 3's pinned-memory column).
UNLIMITED = ("unlimited", "0", "none", "-")


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
class Unparsable(ValueError):
    """An answer the parser could not read; `line` is the line, when one."""

    def __init__(self, message, line=None):
        super(Unparsable, self).__init__(message if line is None else "%s: %r" % (message, line))
        self.line = line


def _lines(out):
    return [line.strip() for line in out.splitlines() if line.strip()]


def _noise(line):
    """A line a tool may print around its answer: an interactive prompt
    (`mps-control>`) or a banner ending in ':' (FORK_MPSCTL's parse cases)."""
    return line.endswith(">") or line.endswith(":")


def parse_nothing(out):
    """Setters: the real shell answers nothing, or echoes the value it set."""
    for line in _lines(out):
        if not re.fullmatch(r"\d+(\.\d+)?[KMGT]?", line) and not _noise(line):
            raise Unparsable("expected no output", line)
    return None


def parse_pid_list(out):
    pids = []
    for line in _lines(out):
        if not line.isdigit():
            raise Unparsable("expected one PID per line", line)
        pids.append(int(line))
    return pids


def parse_percentage(out):
    lines = [line for line in _lines(out) if not _noise(line)]
    if len(lines) != 1 or not re.fullmatch(r"\d+(\.\d+)?", lines[0]):
        raise Unparsable("expected one percentage", lines[0] if lines else None)
    value = float(lines[0])
    if not 0 < value <= 100:
        raise Unparsable("percentage out of range", lines[0])
    return value


def parse_mem_limit(out):
    """(unverified) one size, e.g. 40960M; 0 when no limit is set."""
    lines = [line for line in _lines(out) if not _noise(line)]
    if len(lines) != 1:
        raise Unparsable("expected one memory size", lines[0] if lines else None)
    try:
        return size_to_mib(lines[0])
    except ValueError:
        raise Unparsable("not a memory size", lines[0])


def parse_server_status(out):
    lines = _lines(out)
    if len(lines) != 1 or not re.fullmatch(r"[A-Z_]+", lines[0]):
        raise Unparsable("expected one status word", lines[0] if lines else None)
    return lines[0]


def parse_namespace_help(out):
    """`namespace --help`: which of the guide's five verbs it lists."""
    words = set(re.findall(r"[a-z]+", out))
    return [verb for verb in NAMESPACE_VERBS if verb in words]


NUMBER_RE = re.compile(r"\d+(?:\.\d+)?%?")


def _pinned_mib(token, line):
    if token.lower() in UNLIMITED:
        return None
    try:
        return size_to_mib(token)
    except ValueError:
        raise Unparsable("not a pinned memory limit (a size such as 40960M, or 'unlimited')", line)


def parse_namespace_table(out):
    """`namespace list --server=S`. Its layout is not published (the fork's
    mpsd only collects the names from it); the guide's check 3 shows the
    values: a namespace, its active thread percentage (`50.00`), its pinned
    memory limit (`unlimited`). Read: one row per namespace, those three first,
    whatever columns follow; a header line (the first line, when it holds no
    number), prompts and banners skipped. Any other line fails, named."""
    rows, seen = [], set()
    for index, line in enumerate(_lines(out)):
        cells = line.replace(",", " ").split()
        if _noise(line) or (not rows and index == 0 and not any(NUMBER_RE.fullmatch(c) for c in cells)):
            continue
        if not re.fullmatch(NAMESPACE_PATTERN, cells[0]):
            raise Unparsable("a row must start with a namespace name ([a-z0-9_]+)", line)
        if len(cells) < 2 or not NUMBER_RE.fullmatch(cells[1]):
            raise Unparsable("no active thread percentage after the namespace name", line)
        pct = float(cells[1].rstrip("%"))
        if not 0 <= pct <= 100:
            raise Unparsable("active thread percentage out of range", line)
        if cells[0] in seen:
            raise Unparsable("namespace listed twice", line)
        seen.add(cells[0])
        rows.append({"namespace": cells[0], "active_thread_percentage": pct,
                     "pinned_memory_limit_mib": _pinned_mib(cells[2], line) if len(cells) > 2 else None})
    return rows


def parse_absolute_path(out):
    """`namespace get NAME SERVER pipe_directory`: the first absolute path in
    the answer, whether bare, `key: value`, `key=value`, quoted or a CSV cell
    (the shapes the fork's mpsd reads, FORK_MPSCTL). None there: the daemon
    answered something else, such as an error printed with status 0."""
    for line in _lines(out):
        for token in line.replace("=", " ").replace(",", " ").split():
            token = token.strip("\"'")
            if token.startswith("/"):
                return os.path.normpath(token)
    raise Unparsable("no absolute path in the answer", _lines(out)[0] if _lines(out) else None)


MAWS_NS_RE = re.compile(r"([^/\s]+)/([^\s(]+)(?:\s*\((\d+)\))?")


def parse_clients(out):
    """`client list --format=csv,noheader` (FORK_CLIENT_LIST, recorded on
    driver 615): PID, SERVER, DEVICE, MAWS NS (`<server>/<namespace> (<n>)`),
    CMD; the PID is the first cell. The table format truncates PIDs
    (`316...`): never read it."""
    clients = []
    for line in _lines(out):
        if _noise(line):
            continue
        cells = [cell.strip() for cell in line.split(",", 4)]
        if not cells[0].isdigit() or not 0 < int(cells[0]) <= 4 * 1024 * 1024:
            raise Unparsable("a client row starts with its PID", line)
        client = {"pid": int(cells[0]), "server": None, "device": None, "namespace": None, "command": None}
        if len(cells) == 5:
            maws = MAWS_NS_RE.fullmatch(cells[3])
            client.update(server=cells[1], device=cells[2], command=cells[4],
                          namespace=maws.group(2) if maws else cells[3])
        clients.append(client)
    return clients


# ---------------------------------------------------------------- the table
# stdin: the line written to the legacy shell of a client started without
# options; argv: the arguments after the binary. {name} placeholders are filled
# from the call's keyword arguments (checked by the modules before: no control
# characters, no leading '-', names by the daemon's own rules).
#
# MPS v3 verbs go as the fork's mpsd sends them: `-p 3`, the module, the verb,
# then the namespace name POSITIONAL and the server as --server= (but `namespace
# get NAME SERVER FIELD`, all positional). CUDA_MPS_PROTOCOL_VERSION=3 is set
# too, so an inherited value cannot contradict the -p. The legacy v2 verbs stay
# on standard input without -p; whether a protocol 3 daemon still answers them
# is not shown by any source, so the modules send them to a v3 daemon only when
# a parameter asks for what only they report.
V3 = ["-p", "3"]
V3_ENV = {"CUDA_MPS_PROTOCOL_VERSION": "3"}
MPS_DOCS = "NVIDIA MPS documentation, Legacy MPS v2 interface (docs.nvidia.com/deploy/mps), no recorded answer"

VERBS = {
    # legacy v2 shell
    "get_server_list": {"stdin": "get_server_list", "parse": parse_pid_list, "verified": None,
                        "output": MPS_DOCS},
    "get_server_status": {"stdin": "get_server_status {pid}", "parse": parse_server_status, "verified": None,
                          "output": "inferred"},
    "get_client_list": {"stdin": "get_client_list {pid}", "parse": parse_pid_list, "verified": None,
                        "output": MPS_DOCS},
    "get_default_active_thread_percentage": {
        "stdin": "get_default_active_thread_percentage", "parse": parse_percentage, "verified": DEVICE_PLUGIN_MPS,
        "output": "the device plugin only checks that it answers (its health check); one number assumed"},
    "set_default_active_thread_percentage": {
        "stdin": "set_default_active_thread_percentage {percentage}", "parse": parse_nothing,
        "verified": DEVICE_PLUGIN_MPS, "output": "not read by the device plugin"},
    "get_default_device_pinned_mem_limit": {
        "stdin": "get_default_device_pinned_mem_limit {device}", "parse": parse_mem_limit, "verified": None,
        "output": "inferred: one size"},
    # {limit} is always sent as <MiB>M, the form the device plugin sends
    "set_default_device_pinned_mem_limit": {
        "stdin": "set_default_device_pinned_mem_limit {device} {limit}", "parse": parse_nothing,
        "verified": DEVICE_PLUGIN_MPS, "output": "not read by the device plugin"},
    "quit": {"stdin": "quit", "parse": parse_nothing, "verified": DEVICE_PLUGIN_MPS, "output": "not read"},
    # MPS v3 module verbs (r615+)
    "namespace_help": {"argv": V3 + ["namespace", "--help"], "protocol": 3, "parse": parse_namespace_help,
                       "answers_without_daemon": True, "verified": None,
                       "output": GUIDE + ": the prerequisite check wants it to list create, delete, list, set and "
                                         "get; its layout is not published"},
    "namespace_list": {"argv": V3 + ["namespace", "list", "--server={server}"], "protocol": 3,
                       "parse": parse_namespace_table, "verified": FORK_MPSCTL,
                       "output": "not a published interface (the fork collects names only); values as the "
                                 "guide's check 3 shows them: 50.00, unlimited"},
    "namespace_create": {"argv": V3 + ["namespace", "create", "{name}", "--server={server}"], "protocol": 3,
                         "parse": parse_nothing, "verified": FORK_MPSCTL,
                         "output": "not read by the fork; creating an existing namespace is an error"},
    "namespace_set": {"argv": V3 + ["namespace", "set", "{name}", "--server={server}",
                                    "--active-thread-percentage={percentage}"], "protocol": 3,
                      "parse": parse_nothing, "verified": FORK_MPSCTL,
                      "output": "not read by the fork; fails while a client is attached"},
    "namespace_delete": {"argv": V3 + ["namespace", "delete", "{name}", "--server={server}"], "protocol": 3,
                         "parse": parse_nothing, "verified": FORK_MPSCTL,
                         "output": "not read by the fork; fails while a client is attached"},
    "namespace_get_pipe_directory": {"argv": V3 + ["namespace", "get", "{name}", "{server}", "pipe_directory"],
                                     "protocol": 3, "parse": parse_absolute_path, "verified": FORK_MPSCTL,
                                     "output": "an absolute path, bare or as key: value / key=value (the "
                                               "fork's parser); an error may come with status 0"},
    "client_list": {"argv": V3 + ["client", "list", "--format=csv,noheader"], "protocol": 3,
                    "parse": parse_clients, "verified": FORK_MPSCTL, "output": FORK_CLIENT_LIST},
    "client_terminate": {"argv": V3 + ["client", "terminate", "{pid}"], "protocol": 3, "parse": parse_nothing,
                         "verified": FORK_MPSCTL,
                         "output": "not read; blocks until the client's outstanding work drained"},
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
def v3_support(answer):
    """What `namespace --help` says of MPS v3 (answer: the parsed verbs, or None
    when the tool refused the words, as one older than r615 does)."""
    verbs = answer or []
    missing = [verb for verb in NAMESPACE_VERBS if verb not in verbs]
    return {"supported": not missing, "verbs": verbs, "missing": missing}


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
        privileges = INSUFFICIENT_PRIVILEGES_RE.search(text)
        if privileges:
            raise MpsError("the MPS daemon refuses %s to uid %s: namespace changes need root or the server's "
                           "owner (%s)" % (verb_name, privileges.group(1), text.strip()), result,
                           kind="permission_denied")
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
        if verb_name.startswith("namespace_") and verb_name != "namespace_help":
            missing = UNKNOWN_NAMESPACE_RE.search(text)
            if missing:
                raise MpsError("the MPS daemon has no namespace %r (%s)" % (missing.group(1), text.strip()),
                               result, kind="unknown_namespace")
            if result.rc != 0 and NAMESPACE_BUSY_RE.search(text):
                raise MpsError("%s refused: a client is attached to the namespace (%s). MPS changes or deletes "
                               "a namespace only when no client uses it." % (verb_name, text.strip()), result,
                               kind="namespace_busy")
        if INVALID_DEVICE_RE.search(text):
            raise MpsError("the MPS daemon has no GPU with that index (%s): GPU indexes count from 0"
                           % text.strip(), result, kind="unknown_gpu")
        if DAEMON_NOT_V3_RE.search(text):
            raise MpsError("the MPS control daemon for %s does not run MPS v3 (protocol 3): %s"
                           % (self.pipe_directory, text.strip()), result, kind="daemon_not_v3")
        if result.rc != 0:
            raise MpsError("%s failed (rc=%d): %s" % (verb_name, result.rc, text.strip()), result)
        try:
            return VERBS[verb_name]["parse"](result.stdout)
        except Unparsable as exc:
            raise MpsError("unexpected output of %s (%s)" % (verb_name, exc), result, kind="unparsable")

    # -- the daemon
    def daemon(self):
        return find_daemon(self.pipe_directory)

    def v3_support(self):
        """{supported, verbs, missing}: does this tool offer the v3 namespace verbs?"""
        args, stdin, env = render("namespace_help")
        if not self.runner.available:
            raise self.missing()
        result = self.runner.run(args, stdin=stdin, env=env)
        return v3_support(parse_namespace_help(result.stdout + result.stderr) if result.rc == 0 else None)

    def start_command(self, protocol, multiuser, config_file):
        return self.runner.command(start_args(protocol, multiuser, config_file), env=start_env(protocol))

    def start(self, protocol, multiuser, config_file, timeout=DEFAULT_TIMEOUT):
        result = self.runner.run(start_args(protocol, multiuser, config_file), env=start_env(protocol))
        text = (result.stdout + result.stderr).strip()
        if result.rc != 0 or ALREADY_RUNNING_TEXT in text or INIT_FAILED_TEXT in text:
            hint = (" (a pipe directory longer than %d characters does that, with no log)"
                    % MAX_PIPE_DIRECTORY_LENGTH if INIT_FAILED_TEXT in text else "")
            raise MpsError("starting the MPS control daemon failed (rc=%d): %s%s" % (result.rc, text, hint),
                           result, kind="start_failed")
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
    def configured_servers(self, config_file):
        """The servers of the daemon's configuration file (None when unreadable)."""
        if not config_file:
            return None
        try:
            with open(config_file) as handle:
                return config_file_servers(handle.read())
        except (IOError, OSError, UnicodeDecodeError):
            return None

    def read_state(self, devices=None, servers=None, clients=True, legacy=None):
        """Everything mps_info reports.
        devices: GPU indexes whose default pinned memory limit to read.
        servers: under v3, whose namespaces to list (None: every server of the
        daemon's configuration file; one the daemon lacks fails unknown_server).
        clients: the client list.
        legacy: send the v2 reads (server PIDs, default percentage, `devices`'
        limits); None means only to a protocol 2 daemon."""
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
        v3 = daemon["protocol"] == 3
        if (not v3) if legacy is None else legacy:
            state["server_pids"] = self.call("get_server_list")
            state["default_active_thread_percentage"] = self.call("get_default_active_thread_percentage")
            for device in devices or ():
                state["default_pinned_mem_limits"][str(device)] = self.call(
                    "get_default_device_pinned_mem_limit", device=device)
        if v3:
            configured = self.configured_servers(daemon["config_file"])
            state["servers"] = sorted(configured or {})
            for server in state["servers"] if servers is None else servers:
                state["namespaces"][server] = self.call("namespace_list", server=server)
            if clients:
                state["clients"] = self.call("client_list")
        elif clients:
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
