#!/usr/bin/python
# -*- coding: utf-8 -*-
# Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: mps_control
short_description: Converge a CUDA MPS control daemon and its settings
version_added: 0.1.0
description:
  - Starts or stops the MPS control daemon (C(nvidia-cuda-mps-control -d)) of a pipe
    directory, with protocol 3 (MPS v3, C(-p 3)) or the classic protocol 2, multi-user
    mode (C(-m)) and a v3 configuration file (C(-a)); creates the pipe and log
    directories with the owner, group and mode asked for.
  - Sets the default active thread percentage and the default pinned memory limit per
    GPU, and under MPS v3 creates, updates and deletes namespaces of named servers
    with their active thread percentage, with the verbs the gpu-fractioning fork's mpsd
    sends to the r615 daemon (C(namespace create NAME --server=S), then C(namespace set
    NAME --server=S --active-thread-percentage=P); C(namespace delete NAME --server=S)),
    and reads each namespace's pipe directory back with C(namespace get NAME S pipe_directory).
  - Reads the current state, computes the plan (the commands that change something), then
    runs it and reads the state again; in check mode it returns the plan and changes
    nothing. Legacy commands go to the daemon's standard input, v3 verbs as arguments
    after C(-p 3), as the guide sends them; a protocol 3 daemon gets legacy commands only
    when O(default_active_thread_percentage) or O(default_pinned_mem_limits) ask for them.
  - MPS refuses to change or delete a namespace while a client is attached, so the module
    reads C(client list) first and refuses such a step with RV(failure=namespace_busy),
    naming the clients, before it sends anything.
  - Every parameter is checked before anything changes, and check mode refuses the same
    input as a real run; a refusal names the parameter, the rule and an example, with
    RV(failure=bad_input).
  - The default active thread percentage and pinned memory limits apply to servers
    started after they are set, and are lost when the daemon quits (MPS semantics);
    the module warns when servers already run.
author:
  - smshare.kai maintainers (@smshare)
extends_documentation_fragment:
  - smshare.kai.attributes
  - smshare.kai.mps
options:
  state:
    description:
      - V(present) starts the daemon if it does not run; V(absent) sends it C(quit) and
        waits until it has exited.
    type: str
    choices: [present, absent]
    default: present
  directory_owner:
    description:
      - Owner (a user name or uid) of both directories; changing it needs root.
        Non-root clients need access to the pipe directory.
      - Left as it is when omitted.
    type: str
  directory_group:
    description: Group (a name or gid) of both directories; left as it is when omitted.
    type: str
  pipe_directory_mode:
    description:
      - Mode of the pipe directory as a quoted octal string (for example V('0755')).
      - Left as it is when omitted; a directory the module creates gets V('0755').
    type: raw
  log_directory_mode:
    description: Mode of the log directory, as O(pipe_directory_mode).
    type: raw
  protocol:
    description:
      - V(3) starts MPS v3 (C(-p 3), driver r615 or newer); V(2) the classic protocol.
      - Fails with RV(failure=v3_unsupported) when C(nvidia-cuda-mps-control -p 3 namespace --help)
        does not list create, delete, get, list and set (the guide's prerequisite check).
      - With V(3), O(pipe_directory) may be at most 83 characters (the daemon's namespace
        sockets live below it; longer, it fails to start with no log).
    type: int
    choices: [2, 3]
    default: 3
  multiuser:
    description: Start the daemon in multi-user mode (C(-m)), so servers accept clients of any uid.
    type: bool
    default: false
  config_file:
    description:
      - MPS v3 TOML configuration applied at start (C(-a)); needs O(protocol=3).
      - Its C([servers.NAME]) sections are the servers O(namespaces) may name.
    type: path
  restart:
    description:
      - When the running daemon's protocol, multi-user mode or configuration file differ
        from the ones asked for, V(true) quits and restarts it (its clients lose MPS);
        V(false) fails with RV(failure=mismatch) and says what differs.
    type: bool
    default: false
  default_active_thread_percentage:
    description: Default active thread percentage (1..100) for new MPS servers.
    type: int
  default_pinned_mem_limits:
    description:
      - 'Default pinned device memory limit per GPU index, for example C({"0": "40G"}).'
      - 'Sizes are a whole number of MiB with the unit K, M, G or T (powers of 1024:
        C(40G) is C(40960M)), or C(0) for no limit. They are sent as C(<MiB>M).'
      - A GPU index that the node does not have fails with RV(failure=unknown_gpu)
        (counted with C(nvidia-smi), which must be installed).
    type: dict
  namespaces:
    description: MPS v3 namespaces of named servers (needs O(protocol=3)).
    type: list
    elements: dict
    suboptions:
      server:
        description:
          - The named server (from the configuration file); an unknown server fails with
            RV(failure=unknown_server).
          - Letters, digits, C(_) and C(-).
        type: str
        required: true
      name:
        description:
          - The namespace. Lower-case letters, digits and C(_) only, the only names the r615
            daemon accepts (V(team-A) is refused before any call).
          - Its pipe directory, C(<pipe_directory>/<server>/<name>), may be at most 83 characters.
        type: str
        required: true
      state:
        description: Whether the namespace exists. The V(default) namespace cannot be removed.
        type: str
        choices: [present, absent]
        default: present
      active_thread_percentage:
        description: Its active thread percentage (1..100); required to create it.
        type: int
  timeout:
    description: Seconds (1..3600) to wait for the daemon to come up or to exit.
    type: int
    default: 30
attributes:
  check_mode:
    support: full
    details: Returns the plan in RV(commands) and RV(directories), changes nothing, and refuses what a real run refuses.
  diff_mode:
    support: full
    details: The managed settings (daemon flags, defaults, namespaces, directories) before and after.
  idempotent:
    support: full
    details: Reads the state first and sends only the commands that change something.
seealso:
  - module: smshare.kai.mps_info
  - name: NVIDIA MPS documentation
    description: MPS v3 interface, namespaces and configuration file.
    link: https://docs.nvidia.com/deploy/mps/
"""

EXAMPLES = r"""
- name: MPS v3 daemon as the gpu-fractioning mpsd runs it
  smshare.kai.mps_control:
    pipe_directory: /run/nvidia-mps
    log_directory: /var/log/nvidia-mps
    directory_owner: root
    pipe_directory_mode: "0755"
    protocol: 3
    multiuser: true
    config_file: /etc/nvidia-mps/mps-control.toml

- name: Half of the SMs for every new server, 40 GiB pinned memory on GPU 0
  smshare.kai.mps_control:
    default_active_thread_percentage: 50
    default_pinned_mem_limits:
      "0": 40G

- name: A namespace capped at 25% on the shared server
  smshare.kai.mps_control:
    pipe_directory: /run/nvidia-mps
    config_file: /etc/nvidia-mps/mps-control.toml
    multiuser: true
    namespaces:
      - server: shared
        name: pod_a
        active_thread_percentage: 25

- name: Stop MPS
  smshare.kai.mps_control:
    state: absent
"""

RETURN = r"""
commands:
  description:
    - The commands sent (or, in check mode, that would be sent), in order; each with
      its argv (C(cmd)), standard input and environment overrides. Reads are not listed.
  returned: always
  type: list
  elements: dict
  sample:
    - cmd: [/usr/bin/nvidia-cuda-mps-control, -d, -p, "3", -m]
      stdin: null
      env: {CUDA_MPS_PIPE_DIRECTORY: /tmp/nvidia-mps, CUDA_MPS_LOG_DIRECTORY: /var/log/nvidia-mps,
            CUDA_MPS_PROTOCOL_VERSION: "3"}
    - cmd: [/usr/bin/nvidia-cuda-mps-control]
      stdin: "set_default_active_thread_percentage 50\n"
      env: {CUDA_MPS_PIPE_DIRECTORY: /tmp/nvidia-mps, CUDA_MPS_LOG_DIRECTORY: /var/log/nvidia-mps}
    - cmd: [/usr/bin/nvidia-cuda-mps-control, -p, "3", namespace, create, pod_a, --server=shared]
      stdin: null
      env: {CUDA_MPS_PIPE_DIRECTORY: /tmp/nvidia-mps, CUDA_MPS_LOG_DIRECTORY: /var/log/nvidia-mps,
            CUDA_MPS_PROTOCOL_VERSION: "3"}
    - cmd: [/usr/bin/nvidia-cuda-mps-control, -p, "3", namespace, set, pod_a, --server=shared,
            --active-thread-percentage=25]
      stdin: null
      env: {CUDA_MPS_PIPE_DIRECTORY: /tmp/nvidia-mps, CUDA_MPS_LOG_DIRECTORY: /var/log/nvidia-mps,
            CUDA_MPS_PROTOCOL_VERSION: "3"}
pipe_directories:
  description:
    - Server to namespace to its pipe directory, as the daemon answers C(namespace get NAME SERVER
      pipe_directory), for every namespace of O(namespaces) that exists (after the changes; in check
      mode, the ones that exist already). A client of the namespace uses it as C(CUDA_MPS_PIPE_DIRECTORY).
  returned: always
  type: dict
  sample: {shared: {pod_a: /run/nvidia-mps/shared/pod_a}}
directories:
  description: The directory changes made (or, in check mode, that would be made).
  returned: always
  type: list
  elements: dict
  sample:
    - {path: /tmp/nvidia-mps, create: true, mode: "0755", uid: null, gid: null}
state:
  description:
    - The daemon's state as smshare.kai.mps_info returns it, read after the changes.
    - In check mode, the state as found (nothing changed); the predicted settings are in the diff.
  returned: always
  type: dict
  sample:
    running: true
    protocol: 3
    multiuser: true
    default_active_thread_percentage: 50.0
    default_pinned_mem_limits: {"0": 40960}
    namespaces: {shared: [{namespace: default, active_thread_percentage: 10.0, pinned_memory_limit_mib: null}]}
failure:
  description: >-
    Name of the failure: bad_input (with RV(parameter)), nvidia_cuda_mps_control_missing,
    nvidia_smi_missing, v3_unsupported, daemon_not_v3, unknown_server, unknown_namespace,
    namespace_busy, pipe_directory_too_long, unknown_gpu, mismatch, permission_denied,
    not_running, directory_failed, start_failed, stop_failed, unparsable, failed; or one of smshare.kai.gpu_info's driver failures
    (driver_not_loaded, driver_library_mismatch) from counting the GPUs.
  returned: failure
  type: str
parameter:
  description: The parameter a RV(failure=bad_input) refusal is about.
  returned: failure
  type: str
cmd:
  description: The command that failed, when one ran.
  returned: failure
  type: list
  elements: str
"""

import copy
import grp
import os
import pwd
import stat

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.smshare.kai.plugins.module_utils import mps as mpslib
from ansible_collections.smshare.kai.plugins.module_utils import validate
from ansible_collections.smshare.kai.plugins.module_utils.nvidia_smi import NvidiaSmi
from ansible_collections.smshare.kai.plugins.module_utils.runner import ToolError

MpsError = mpslib.MpsError


# ---------------------------------------------------------------- 1. input
def _account(parameter, value, lookup, example):
    """A user or group name (or number) that exists here: its id."""
    validate.text(parameter, value, example, positional=True)
    if value.isdigit():
        return int(value)
    try:
        return lookup(value)
    except KeyError:
        raise validate.BadInput(parameter, value, "must be a %s that exists on this host"
                                % ("user" if parameter.endswith("owner") else "group"), example)


def check_input(params):
    """Every rule on the parameters, before anything is read or changed.
    Returns the wanted state; raises BadInput."""
    wanted = {key: params[key] for key in ("state", "protocol", "multiuser", "restart")}
    wanted["timeout"] = mpslib.timeout("timeout", params["timeout"])
    uid = gid = None
    if params["directory_owner"] is not None:
        uid = _account("directory_owner", params["directory_owner"], lambda n: pwd.getpwnam(n).pw_uid, "root")
    if params["directory_group"] is not None:
        gid = _account("directory_group", params["directory_group"], lambda n: grp.getgrnam(n).gr_gid, "root")
    pipe = validate.path("pipe_directory", params["pipe_directory"], mpslib.DEFAULT_PIPE_DIRECTORY)
    log = validate.path("log_directory", params["log_directory"], mpslib.DEFAULT_LOG_DIRECTORY)
    if params["protocol"] == 3 and params["state"] == "present":
        mpslib.pipe_directory_fits("pipe_directory", pipe, pipe)
    pipe_mode = validate.mode("pipe_directory_mode", params["pipe_directory_mode"], required=False)
    log_mode = validate.mode("log_directory_mode", params["log_directory_mode"], required=False)
    wanted.update(pipe_directory=pipe, log_directory=log)
    wanted["directories"] = [{"parameter": "pipe_directory", "path": pipe, "mode": pipe_mode, "uid": uid, "gid": gid}]
    if log != pipe:
        wanted["directories"].append({"parameter": "log_directory", "path": log, "mode": log_mode, "uid": uid,
                                      "gid": gid})
    elif None not in (pipe_mode, log_mode) and pipe_mode != log_mode:
        raise validate.BadInput("log_directory_mode", params["log_directory_mode"], "must equal "
                                "pipe_directory_mode: both directories are %s" % pipe)
    elif pipe_mode is None:
        wanted["directories"][0]["mode"] = log_mode

    wanted["config_file"] = params["config_file"]
    if params["config_file"] is not None:
        validate.path("config_file", params["config_file"], "/etc/nvidia-mps/mps-control.toml")
        if params["protocol"] != 3:
            raise validate.BadInput("config_file", params["config_file"], "needs MPS v3 (-a): set protocol: 3")
        if not os.path.isfile(params["config_file"]):
            raise validate.BadInput("config_file", params["config_file"], "must be an existing file",
                                    "/etc/nvidia-mps/mps-control.toml")

    pct = params["default_active_thread_percentage"]
    wanted["default_active_thread_percentage"] = pct if pct is None else mpslib.percentage(
        "default_active_thread_percentage", pct)

    limits = {}
    for device, size in (params["default_pinned_mem_limits"] or {}).items():
        index = mpslib.gpu_index("default_pinned_mem_limits key", device)
        if str(index) in limits:
            raise validate.BadInput("default_pinned_mem_limits", device, "names GPU %d twice" % index, '{"0": "40G"}')
        limits[str(index)] = mpslib.memory_size("default_pinned_mem_limits[%s]" % device, size)
    wanted["default_pinned_mem_limits"] = dict(sorted(limits.items(), key=lambda item: int(item[0])))

    namespaces, seen = [], set()
    for index, ns in enumerate(params["namespaces"] or []):
        where = "namespaces[%d]" % index
        server = mpslib.server_name(where + ".server", ns["server"])
        ns_name = mpslib.namespace_name(where + ".name", ns["name"])
        if (server, ns_name) in seen:
            raise validate.BadInput(where + ".name", ns_name, "is listed twice for server %s" % server, "pod_b")
        if ns["state"] == "present":
            mpslib.pipe_directory_fits(where + ".name", ns_name,
                                       mpslib.namespace_pipe_directory(pipe, server, ns_name))
        seen.add((server, ns_name))
        ns_pct = ns["active_thread_percentage"]
        if ns_pct is not None:
            mpslib.percentage(where + ".active_thread_percentage", ns_pct)
        elif ns["state"] == "present":
            raise validate.BadInput(where + ".active_thread_percentage", None,
                                    "is required to create namespace %s" % ns_name, "50")
        if ns["state"] == "absent" and ns_name == "default":
            raise validate.BadInput(where + ".name", ns_name, "the default namespace cannot be removed "
                                    "(state: absent)", "pod_a")
        namespaces.append({"server": server, "name": ns_name, "state": ns["state"],
                           "active_thread_percentage": ns_pct})
    if namespaces and params["protocol"] != 3:
        raise validate.BadInput("namespaces", [n["name"] for n in namespaces], "needs MPS v3: set protocol: 3")
    wanted["namespaces"] = namespaces

    if params["state"] == "absent":
        settings = [k for k in ("default_active_thread_percentage", "default_pinned_mem_limits", "namespaces")
                    if params[k]]
        if settings:
            raise validate.BadInput(settings[0], params[settings[0]], "cannot be set with state: absent (the "
                                    "daemon forgets its settings when it quits)")
    return wanted


# ---------------------------------------------------------------- 2. read
def stat_directory(path):
    """What the plan needs to know about one directory (or where it would go)."""
    found = {"exists": os.path.lexists(path), "is_dir": os.path.isdir(path), "mode": None, "uid": None,
             "gid": None, "ancestor": None, "ancestor_is_dir": None, "ancestor_writable": None}
    if found["is_dir"]:
        st = os.stat(path)
        found.update(mode=st.st_mode & 0o7777, uid=st.st_uid, gid=st.st_gid)
    elif not found["exists"]:
        ancestor = os.path.dirname(path)
        while not os.path.lexists(ancestor):
            ancestor = os.path.dirname(ancestor)
        found.update(ancestor=ancestor, ancestor_is_dir=os.path.isdir(ancestor),
                     ancestor_writable=os.access(ancestor, os.W_OK | os.X_OK))
        if found["ancestor_is_dir"]:  # the group a new directory gets
            st = os.stat(ancestor)
            found["gid"] = st.st_gid if st.st_mode & stat.S_ISGID else os.getegid()
    return found


def count_gpus(module):
    smi = NvidiaSmi(module)
    if not smi.available:
        raise MpsError("nvidia-smi is not installed: mps_control counts the GPUs with it before it sets "
                       "default_pinned_mem_limits. Install the NVIDIA driver's utilities.",
                       kind="nvidia_smi_missing")
    return len(smi.query([("index", "index", int)]))


def read_daemon(mps, wanted, devices):
    """The daemon's settings this module manages, and its directories. The
    legacy v2 reads go to a v3 daemon only when a default setting is asked for;
    the namespaces of the servers named, and the clients (which keep a namespace
    from changing), only when namespaces are."""
    legacy = True if wanted["default_active_thread_percentage"] is not None or devices else None
    state = mps.read_state(devices=devices, servers=[], clients=False, legacy=legacy)
    # a daemon started otherwise is restarted or refused (plan): its servers are not the ones asked for
    if state["running"] and state["protocol"] == 3 and wanted["namespaces"] and not mismatch(state, wanted):
        for server in sorted(set(ns["server"] for ns in wanted["namespaces"])):
            if state["servers"] and server not in state["servers"]:
                raise MpsError("unknown MPS server %r: the daemon's configuration %s has %s. Nothing was changed."
                               % (server, state["config_file"], ", ".join(state["servers"])), kind="unknown_server")
            state["namespaces"][server] = mps.call("namespace_list", server=server)
        state["clients"] = mps.call("client_list")
    return state, dict((d["path"], stat_directory(d["path"])) for d in wanted["directories"])


def read_pipe_directories(mps, wanted, state):
    """The pipe directory of every wanted namespace the daemon has (`namespace
    get`: read, never derived), server -> name -> path."""
    found = {}
    for ns in wanted["namespaces"]:
        rows = state["namespaces"].get(ns["server"]) or []
        if ns["state"] == "present" and any(row["namespace"] == ns["name"] for row in rows):
            found.setdefault(ns["server"], {})[ns["name"]] = mps.call(
                "namespace_get_pipe_directory", server=ns["server"], name=ns["name"])
    return found


def read(module, mps, wanted):
    """The host and the daemon as they are now, as far as the plan needs them."""
    current = {"installed": mps.available, "v3": None, "gpu_count": None, "config_servers": None,
               "euid": os.geteuid(), "groups": sorted(set(os.getgroups() + [os.getegid()]))}
    if wanted["config_file"]:
        try:
            with open(wanted["config_file"]) as handle:
                current["config_servers"] = mpslib.config_file_servers(handle.read())
        except (IOError, OSError, UnicodeDecodeError) as exc:
            raise validate.BadInput("config_file", wanted["config_file"], "cannot be read (%s)" % exc)
    devices = list(wanted["default_pinned_mem_limits"])
    if current["installed"] and wanted["state"] == "present":
        if wanted["protocol"] == 3:
            current["v3"] = mps.v3_support()
        if devices:
            current["gpu_count"] = count_gpus(module)
            devices = [d for d in devices if int(d) < current["gpu_count"]]
    current["daemon"], current["directories"] = read_daemon(mps, wanted, devices)
    return current


# ---------------------------------------------------------------- 3. plan
def settings(daemon, directories, wanted):
    """The part of the state this module manages, in the shape of the diff."""
    namespaces = {}
    for server, rows in daemon["namespaces"].items():
        namespaces[server] = dict((row["namespace"], float(row["active_thread_percentage"])) for row in rows)
    return {
        "running": daemon["running"],
        "protocol": daemon["protocol"],
        "multiuser": daemon["multiuser"],
        "config_file": daemon["config_file"],
        "default_active_thread_percentage": daemon["default_active_thread_percentage"],
        "default_pinned_mem_limits": dict((d, daemon["default_pinned_mem_limits"].get(d))
                                          for d in wanted["default_pinned_mem_limits"] if daemon["running"]),
        "namespaces": namespaces,
        "directories": dict((path, None if not found["is_dir"] else {
            "mode": "%04o" % found["mode"], "uid": found["uid"], "gid": found["gid"]})
            for path, found in directories.items()),
    }


def mismatch(daemon, wanted):
    differences = []
    for key in ("protocol", "multiuser", "config_file"):
        if daemon[key] != wanted[key]:
            differences.append("%s %s (wanted %s)" % (key, daemon[key], wanted[key]))
    return differences


def directory_steps(current, wanted):
    steps = []
    for want in wanted["directories"]:
        path, found = want["path"], current["directories"][want["path"]]
        if found["exists"] and not found["is_dir"]:
            raise validate.BadInput(want["parameter"], path, "exists and is not a directory", "/run/nvidia-mps")
        if not found["exists"]:
            if not found["ancestor_is_dir"]:
                raise validate.BadInput(want["parameter"], path, "cannot be created: %s is not a directory"
                                        % found["ancestor"], "/run/nvidia-mps")
            if not found["ancestor_writable"]:
                raise MpsError("cannot create %s %s: %s is not writable by this user (run as root)"
                               % (want["parameter"], path, found["ancestor"]), kind="permission_denied")
            step = {"path": path, "create": True,
                    "mode": mpslib.DEFAULT_DIRECTORY_MODE if want["mode"] is None else want["mode"],
                    "uid": want["uid"], "gid": want["gid"]}
            owner = current["euid"]
        else:
            step = {"path": path, "create": False,
                    "mode": want["mode"] if want["mode"] not in (None, found["mode"]) else None,
                    "uid": want["uid"] if want["uid"] not in (None, found["uid"]) else None,
                    "gid": want["gid"] if want["gid"] not in (None, found["gid"]) else None}
            owner = found["uid"]
            if step["mode"] is None and step["uid"] is None and step["gid"] is None:
                continue
        if current["euid"] != 0:
            if step["uid"] not in (None, current["euid"]) or owner != current["euid"] or \
                    step["gid"] not in [None] + current["groups"]:
                raise MpsError("changing the owner, group or mode of %s %s needs root" % (want["parameter"], path),
                               kind="permission_denied")
        steps.append(dict(step, do="directory"))
    return steps


def directory_after(found, step, euid):
    """A directory's settings once `step` ran on it."""
    before = found if not step["create"] else {"mode": None, "uid": euid, "gid": found["gid"]}
    mode = step["mode"] if step["mode"] is not None else before["mode"]
    return {"mode": "%04o" % mode,
            "uid": step["uid"] if step["uid"] is not None else before["uid"],
            "gid": step["gid"] if step["gid"] is not None else before["gid"]}


def fresh_daemon(wanted, config_servers):
    """What a daemon just started with these parameters has: MPS's defaults and
    the servers and namespaces of its configuration file."""
    servers = {}
    for name, server in (config_servers or {}).items():
        servers[name] = dict((ns, spec["active_thread_percentage"]) for ns, spec in server["namespaces"].items())
    return {"default_active_thread_percentage": 100.0, "default_pinned_mem_limits": {}, "servers": servers}


def refuse_what_cannot_be_done(current, wanted):
    if not current["installed"]:
        raise MpsError("%s is not installed: install the NVIDIA driver's compute utilities (it ships with "
                       "the driver, e.g. nvidia-compute-utils-615)" % mpslib.BINARY, kind=mpslib.MISSING)
    if wanted["protocol"] == 3 and not current["v3"]["supported"]:
        raise MpsError("this nvidia-cuda-mps-control has no MPS v3 namespace verbs (`-p 3 namespace --help` "
                       "lacks %s): MPS v3 needs driver r615 or newer. Upgrade the driver, or use protocol: 2 "
                       "without namespaces. Nothing was changed." % ", ".join(current["v3"]["missing"]),
                       kind="v3_unsupported")
    count = current["gpu_count"]
    for device in wanted["default_pinned_mem_limits"]:
        if count is not None and int(device) >= count:
            raise MpsError("default_pinned_mem_limits names GPU %s, but this node has %d GPU%s (indexes 0 to %d). "
                           "Nothing was changed." % (device, count, "" if count == 1 else "s", count - 1),
                           kind="unknown_gpu")
    differences = mismatch(current["daemon"], wanted) if current["daemon"]["running"] else []
    if differences and not wanted["restart"]:
        raise MpsError("the MPS control daemon for %s runs with %s: stop it, or set restart: true (its clients "
                       "lose MPS). Nothing was changed." % (wanted["pipe_directory"], "; ".join(differences)),
                       kind="mismatch")
    return differences


def default_steps(base, wanted, after):
    """Set the default active thread percentage and pinned memory limits that differ from `base`."""
    steps = []
    after["default_active_thread_percentage"] = base["default_active_thread_percentage"]
    after["default_pinned_mem_limits"] = dict((d, base["default_pinned_mem_limits"].get(d))
                                              for d in wanted["default_pinned_mem_limits"])
    pct = wanted["default_active_thread_percentage"]
    if pct is not None and base["default_active_thread_percentage"] != float(pct):
        steps.append({"do": "verb", "verb": "set_default_active_thread_percentage", "params": {"percentage": pct}})
        after["default_active_thread_percentage"] = float(pct)
    for device, mib in wanted["default_pinned_mem_limits"].items():
        if base["default_pinned_mem_limits"].get(device) != mib:
            steps.append({"do": "verb", "verb": "set_default_device_pinned_mem_limit",
                          "params": {"device": int(device), "limit": "%dM" % mib if mib else "0"}})
            after["default_pinned_mem_limits"][device] = mib
    return steps


def refuse_if_busy(ns, clients, what):
    """MPS refuses `namespace set` and `delete` while a client is attached
    (mpslib.FORK_MPSCTL): say so before sending them."""
    attached = [c for c in clients if c.get("server") == ns["server"] and c.get("namespace") == ns["name"]]
    if attached:
        raise MpsError("namespace %s on server %s has %d client%s attached (%s): MPS cannot %s a namespace "
                       "while a client uses it. Stop the client first (or `client terminate PID`). Nothing was "
                       "changed." % (ns["name"], ns["server"], len(attached), "" if len(attached) == 1 else "s",
                                     ", ".join("%d %s" % (c["pid"], c.get("command") or "") for c in attached),
                                     what), kind="namespace_busy")


def namespace_steps(base, wanted, after, clients=()):
    """Create (then cap), set or delete the namespaces that differ from `base`;
    unknown servers and busy namespaces are refused."""
    steps = []
    after["namespaces"] = {}
    for ns in wanted["namespaces"]:
        if ns["server"] not in base["servers"]:
            raise MpsError("unknown MPS server %r: the daemon has %s. Nothing was changed." % (
                ns["server"], ", ".join(sorted(base["servers"])) or "no named servers (declare them in config_file)"),
                kind="unknown_server")
        spaces = after["namespaces"].setdefault(ns["server"], dict(base["servers"][ns["server"]]))
        existing = spaces.get(ns["name"])
        target = {"server": ns["server"], "name": ns["name"]}
        if ns["state"] == "absent":
            if existing is not None:
                refuse_if_busy(ns, clients, "delete")
                steps.append({"do": "verb", "verb": "namespace_delete", "params": target})
                del spaces[ns["name"]]
            continue
        pct = float(ns["active_thread_percentage"])
        if existing is None:
            # The r615 daemon creates a namespace uncapped, then takes its cap (the fork's order).
            steps.append({"do": "verb", "verb": "namespace_create", "params": target, "created": True})
            steps.append({"do": "verb", "verb": "namespace_set",
                          "params": dict(target, percentage=ns["active_thread_percentage"])})
        elif existing != pct:
            refuse_if_busy(ns, clients, "change")
            steps.append({"do": "verb", "verb": "namespace_set",
                          "params": dict(target, percentage=ns["active_thread_percentage"])})
        spaces[ns["name"]] = pct
    return steps


def plan(current, wanted):
    """The steps from the current state to the wanted one, and the settings
    before and after them. Pure: reads nothing, changes nothing. Raises a
    ToolError (named failure) for what cannot be done, before any step runs."""
    daemon = current["daemon"]
    before = settings(daemon, current["directories"], wanted)
    after = copy.deepcopy(before)
    if wanted["state"] == "absent":
        if not daemon["running"]:
            return {"steps": [], "before": before, "after": after, "warnings": []}
        after.update(running=False, protocol=None, multiuser=None, config_file=None,
                     default_active_thread_percentage=None, namespaces={})
        return {"steps": [{"do": "quit"}], "before": before, "after": after, "warnings": []}

    restart = bool(refuse_what_cannot_be_done(current, wanted))
    steps = directory_steps(current, wanted)
    for step in steps:
        after["directories"][step["path"]] = directory_after(current["directories"][step["path"]], step,
                                                             current["euid"])
    if restart or not daemon["running"]:
        steps += [{"do": "quit"}] if restart else []
        steps.append({"do": "start"})
        base = fresh_daemon(wanted, current["config_servers"])
        after.update(running=True, protocol=wanted["protocol"], multiuser=wanted["multiuser"],
                     config_file=wanted["config_file"])
    else:
        named = set(daemon["servers"]) | set(before["namespaces"])
        base = {"default_active_thread_percentage": daemon["default_active_thread_percentage"],
                "default_pinned_mem_limits": daemon["default_pinned_mem_limits"],
                "servers": dict((name, before["namespaces"].get(name, {})) for name in named)}
    defaults = default_steps(base, wanted, after)
    warnings = []
    if defaults and daemon["running"] and not restart and daemon["server_pids"]:
        warnings.append("MPS servers already run (%s): default settings apply to servers started from now on"
                        % ", ".join(map(str, daemon["server_pids"])))
    clients = [] if restart or not daemon["running"] else daemon["clients"]
    steps += defaults + namespace_steps(base, wanted, after, clients)
    return {"steps": steps, "before": before, "after": after, "warnings": warnings}


# ---------------------------------------------------------------- 4. apply
def command(mps, wanted, step):
    if step["do"] == "start":
        return mps.start_command(wanted["protocol"], wanted["multiuser"], wanted["config_file"])
    if step["do"] == "quit":
        return mps.command("quit")
    return mps.command(step["verb"], **step["params"])


def make_directory(step):
    try:
        if step["create"]:
            os.makedirs(step["path"], step["mode"])
        if step["mode"] is not None:
            os.chmod(step["path"], step["mode"])  # makedirs' mode is filtered by the umask
        if step["uid"] is not None or step["gid"] is not None:
            os.chown(step["path"], -1 if step["uid"] is None else step["uid"],
                     -1 if step["gid"] is None else step["gid"])
    except (IOError, OSError) as exc:
        raise MpsError("could not prepare %s: %s" % (step["path"], exc), kind="directory_failed")


def apply(mps, wanted, steps):
    for step in steps:
        if step["do"] == "directory":
            make_directory(step)
        elif step["do"] == "quit":
            mps.stop(timeout=wanted["timeout"])
        elif step["do"] == "start":
            mps.start(wanted["protocol"], wanted["multiuser"], wanted["config_file"], timeout=wanted["timeout"])
        else:
            mps.call(step["verb"], **step["params"])


def check_pipe_directories(mps, steps, found):
    """A namespace this run created whose real pipe directory is too long for
    the daemon's sockets is deleted again, and the run fails naming it."""
    for step in steps:
        if not step.get("created"):
            continue
        server, name = step["params"]["server"], step["params"]["name"]
        path = (found.get(server) or {}).get(name)
        if path is not None and len(path) > mpslib.MAX_PIPE_DIRECTORY_LENGTH:
            mps.call("namespace_delete", server=server, name=name)
            raise MpsError("the MPS daemon put namespace %s at %s, %d characters: over the %d its sockets fit in, "
                           "so it was deleted again. Shorten the name or the pipe directory."
                           % (name, path, len(path), mpslib.MAX_PIPE_DIRECTORY_LENGTH),
                           kind="pipe_directory_too_long")


def directory_record(step):
    return {"path": step["path"], "create": step["create"],
            "mode": None if step["mode"] is None else "%04o" % step["mode"], "uid": step["uid"], "gid": step["gid"]}


# ---------------------------------------------------------------- module
def main():
    argument_spec = dict(
        mpslib.ARGUMENT_SPEC,
        state=dict(type="str", choices=["present", "absent"], default="present"),
        directory_owner=dict(type="str"),
        directory_group=dict(type="str"),
        pipe_directory_mode=dict(type="raw"),
        log_directory_mode=dict(type="raw"),
        protocol=dict(type="int", choices=[2, 3], default=3),
        multiuser=dict(type="bool", default=False),
        config_file=dict(type="path"),
        restart=dict(type="bool", default=False),
        default_active_thread_percentage=dict(type="int"),
        default_pinned_mem_limits=dict(type="dict"),
        namespaces=dict(type="list", elements="dict", options=dict(
            server=dict(type="str", required=True),
            name=dict(type="str", required=True),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            active_thread_percentage=dict(type="int"),
        )),
        timeout=dict(type="int", default=mpslib.DEFAULT_TIMEOUT),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    result = {"changed": False, "commands": [], "directories": [], "pipe_directories": {}}
    try:
        wanted = check_input(module.params)
        mps = mpslib.MpsControl(module, wanted["pipe_directory"], wanted["log_directory"])
        current = read(module, mps, wanted)
        planned = plan(current, wanted)
        steps = planned["steps"]
        result.update(changed=bool(steps),
                      commands=[command(mps, wanted, s) for s in steps if s["do"] != "directory"],
                      directories=[directory_record(s) for s in steps if s["do"] == "directory"])
        state, after = current["daemon"], planned["after"]
        if steps and not module.check_mode:
            apply(mps, wanted, steps)
            state, directories = read_daemon(mps, wanted, list(wanted["default_pinned_mem_limits"]))
            after = settings(state, directories, wanted)
        result["pipe_directories"] = read_pipe_directories(mps, wanted, state) if state["running"] else {}
        if steps and not module.check_mode:
            check_pipe_directories(mps, steps, result["pipe_directories"])
    except ToolError as exc:
        module.fail_json(msg=exc.msg, **dict(result, **exc.details()))
    except (IOError, OSError) as exc:  # the host refused a read (a directory we may not search)
        module.fail_json(msg="reading the MPS state failed: %s" % exc, failure="failed", **result)
    for warning in planned["warnings"]:
        module.warn(warning)
    result["state"] = state
    if module._diff:
        result["diff"] = {"before": planned["before"], "after": after}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
