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
    device, and under MPS v3 creates, updates and deletes namespaces of named servers
    with their active thread percentage.
  - Reads the current state first and sends only the commands that change something,
    legacy commands on the daemon's standard input and v3 verbs as arguments, as the
    real tool expects. In check mode it returns the commands it would send.
  - Bad input (a percentage outside 1..100, an unknown server, a pipe directory that is
    a file, a malformed memory size) fails before anything changes.
  - The default active thread percentage and pinned memory limits apply to servers
    started after they are set, and are lost when the daemon quits (MPS semantics);
    the module warns when servers already run.
author:
  - smshare.kai maintainers (@smshare)
options:
  state:
    description:
      - V(present) starts the daemon if it does not run; V(absent) sends it C(quit) and
        waits until it has exited.
    type: str
    choices: [present, absent]
    default: present
  pipe_directory:
    description: C(CUDA_MPS_PIPE_DIRECTORY) of the daemon (control socket, pid file).
    type: path
    default: /tmp/nvidia-mps
  log_directory:
    description: C(CUDA_MPS_LOG_DIRECTORY) of the daemon (control.log, server.log).
    type: path
    default: /var/log/nvidia-mps
  directory_owner:
    description:
      - Owner of both directories. Non-root clients need access to the pipe directory.
      - Left as it is when omitted.
    type: str
  directory_group:
    description: Group of both directories; left as it is when omitted.
    type: str
  pipe_directory_mode:
    description: Mode of the pipe directory (for example V('0755')); left as it is when omitted.
    type: raw
  log_directory_mode:
    description: Mode of the log directory; left as it is when omitted.
    type: raw
  protocol:
    description:
      - V(3) starts MPS v3 (C(-p 3), driver r615 or newer); V(2) the classic protocol.
      - Fails clearly when the installed tool has no protocol 3.
    type: int
    choices: [2, 3]
    default: 3
  multiuser:
    description: Start the daemon in multi-user mode (C(-m)), so servers accept clients of any uid.
    type: bool
    default: false
  config_file:
    description: MPS v3 TOML configuration applied at start (C(-a)); needs O(protocol=3).
    type: path
  restart:
    description:
      - When the running daemon's protocol, multi-user mode or configuration file differ
        from the ones asked for, V(true) quits and restarts it (its clients lose MPS);
        V(false) fails and says what differs.
    type: bool
    default: false
  default_active_thread_percentage:
    description: Default active thread percentage (1..100) for new MPS servers.
    type: int
  default_pinned_mem_limits:
    description:
      - 'Default pinned device memory limit per device index, for example C({"0": "40G"}).'
      - Sizes take a K, M, G or T suffix.
    type: dict
  namespaces:
    description: MPS v3 namespaces of named servers (needs O(protocol=3)).
    type: list
    elements: dict
    suboptions:
      server:
        description: The named server (from the configuration file); an unknown server fails.
        type: str
        required: true
      name:
        description: The namespace.
        type: str
        required: true
      state:
        description: Whether the namespace exists.
        type: str
        choices: [present, absent]
        default: present
      active_thread_percentage:
        description: Its active thread percentage (1..100); required to create it.
        type: int
  timeout:
    description: Seconds to wait for the daemon to come up or to exit.
    type: int
    default: 30
attributes:
  check_mode:
    support: full
    description: Returns the commands it would send in RV(commands) and changes nothing.
  diff_mode:
    support: full
    description: Shows the daemon's state before and after.
  idempotent:
    support: full
    description: Reads the state first and sends only the commands that change something.
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
        name: pod-a
        active_thread_percentage: 25

- name: Stop MPS
  smshare.kai.mps_control:
    state: absent
"""

RETURN = r"""
commands:
  description:
    - The commands sent (or, in check mode, that would be sent), in order; each with
      its argv (C(cmd)), standard input and environment overrides.
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
state:
  description: The daemon's state after the run (predicted in check mode); as smshare.kai.mps_info returns it.
  returned: always
  type: dict
  sample:
    running: true
    protocol: 3
    multiuser: true
    default_active_thread_percentage: 50.0
    default_pinned_mem_limits: {"0": 40960}
    namespaces: {shared: [{namespace: default, active_thread_percentage: 100}]}
failure:
  description: >-
    Name of the failure (bad_input, missing, no_v3, not_running, permission_denied,
    unknown_server, mismatch, start_failed, stop_failed, unparsable, failed).
  returned: failure
  type: str
cmd:
  description: The command that failed.
  returned: failure
  type: list
  elements: str
"""

import copy
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.smshare.kai.plugins.module_utils.mps import (
    MpsControl,
    MpsError,
    config_file_servers,
    size_to_mib,
)


class BadInput(Exception):
    pass


def validate(params):
    """Everything that can be checked before touching the host."""
    for key in ("pipe_directory", "log_directory"):
        path = params[key]
        if os.path.exists(path) and not os.path.isdir(path):
            raise BadInput("%s %s exists and is not a directory" % (key, path))
    pct = params["default_active_thread_percentage"]
    if pct is not None and not 1 <= pct <= 100:
        raise BadInput("default_active_thread_percentage must be 1..100, got %d" % pct)
    limits = {}
    for device, size in (params["default_pinned_mem_limits"] or {}).items():
        if not str(device).isdigit():
            raise BadInput("default_pinned_mem_limits keys are GPU indexes, got %r" % (device,))
        try:
            limits[str(int(device))] = (str(size), size_to_mib(size))
        except ValueError as exc:
            raise BadInput("default_pinned_mem_limits[%s]: %s" % (device, exc))
    seen = set()
    for ns in params["namespaces"] or []:
        key = (ns["server"], ns["name"])
        if key in seen:
            raise BadInput("namespace %s on server %s is listed twice" % (ns["name"], ns["server"]))
        seen.add(key)
        ns_pct = ns["active_thread_percentage"]
        if ns_pct is not None and not 1 <= ns_pct <= 100:
            raise BadInput("namespace %s on server %s: active_thread_percentage must be 1..100, got %d"
                           % (ns["name"], ns["server"], ns_pct))
        if ns["state"] == "present" and ns_pct is None:
            raise BadInput("namespace %s on server %s: active_thread_percentage is required"
                           % (ns["name"], ns["server"]))
        if ns["state"] == "absent" and ns["name"] == "default":
            raise BadInput("the default namespace of server %s cannot be removed" % ns["server"])
    if params["namespaces"] and params["protocol"] != 3:
        raise BadInput("namespaces need MPS v3: set protocol: 3")
    if params["config_file"]:
        if params["protocol"] != 3:
            raise BadInput("config_file (-a) needs MPS v3: set protocol: 3")
        if not os.path.isfile(params["config_file"]):
            raise BadInput("config_file %s does not exist" % params["config_file"])
    if params["state"] == "absent":
        settings = [k for k in ("default_active_thread_percentage", "default_pinned_mem_limits",
                                "namespaces") if params[k]]
        if settings:
            raise BadInput("state=absent cannot also set %s: the daemon forgets them when it quits"
                           % ", ".join(settings))
    return limits


class Converger:
    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.mps = MpsControl(module, self.params["pipe_directory"], self.params["log_directory"])
        self.commands = []
        self.dir_changed = False
        self.warnings = []

    def fail(self, msg, **extra):
        extra.setdefault("commands", self.commands)
        self.module.fail_json(msg=msg, **extra)

    # -- directories
    def ensure_directories(self, diff):
        changed = False
        for key, mode_key in (("pipe_directory", "pipe_directory_mode"),
                              ("log_directory", "log_directory_mode")):
            path = self.params[key]
            if not os.path.isdir(path):
                changed = True
                diff["before"]["%s_exists" % key] = False
                diff["after"]["%s_exists" % key] = True
                if self.module.check_mode:
                    continue
                os.makedirs(path, 0o755)
            if self.module.check_mode and not os.path.isdir(path):
                continue
            mode = self.params[mode_key]
            if mode is not None:
                changed = self.module.set_mode_if_different(path, mode, changed, diff=None)
            if self.params["directory_owner"]:
                changed = self.module.set_owner_if_different(path, self.params["directory_owner"], changed)
            if self.params["directory_group"]:
                changed = self.module.set_group_if_different(path, self.params["directory_group"], changed)
        return changed

    def directory_facts(self):
        facts = {}
        for key in ("pipe_directory", "log_directory"):
            path = self.params[key]
            if os.path.isdir(path):
                st = os.stat(path)
                facts[key] = {"mode": "%04o" % (st.st_mode & 0o7777), "uid": st.st_uid, "gid": st.st_gid}
            else:
                facts[key] = None
        return facts

    # -- planning
    def wanted_servers(self, current, starting):
        """Named servers (with namespaces) the daemon has, or will have once started."""
        if not starting:
            return None
        if not self.params["config_file"]:
            return {}
        with open(self.params["config_file"]) as handle:
            return config_file_servers(handle.read())

    def run(self):
        params = self.params
        try:
            limits = validate(params)
        except BadInput as exc:
            self.fail(str(exc), failure="bad_input")

        if not self.mps.available:
            if params["state"] == "absent":
                self.finish(False, {"running": False}, {"running": False}, {})
            self.fail("nvidia-cuda-mps-control is not installed: install the NVIDIA driver's "
                      "compute utilities", failure="missing")
        try:
            return self._run(limits)
        except MpsError as exc:
            self.fail(exc.msg, **exc.details())

    def _run(self, limits):
        params = self.params
        mps = self.mps
        if params["state"] == "present" and params["protocol"] == 3 and not mps.v3_supported():
            self.fail("this nvidia-cuda-mps-control has no protocol 3: MPS v3 needs driver r615 or "
                      "newer. Upgrade the driver, or use protocol: 2 without namespaces.",
                      failure="no_v3")
        devices = sorted(limits, key=int)
        v3_details = bool(params["namespaces"])
        before = mps.read_state(devices=devices, clients=False, named_servers=v3_details)
        diff = {"before": {"daemon": copy.deepcopy(before), "directories": self.directory_facts()},
                "after": {}}
        after = copy.deepcopy(before)
        changed = False

        if params["state"] == "absent":
            if before["running"]:
                changed = True
                self.commands.append(mps.command("quit"))
                if not self.module.check_mode:
                    mps.stop(timeout=params["timeout"])
                after = {"running": False}
            diff["after"] = {"daemon": after, "directories": self.directory_facts()}
            self.finish(changed, before, after, diff)

        restart = False
        if before["running"]:
            mismatch = self.mismatch(before)
            if mismatch:
                if not params["restart"]:
                    self.fail("the MPS control daemon for %s runs with %s: stop it, or set "
                              "restart: true (its clients lose MPS)"
                              % (params["pipe_directory"], "; ".join(mismatch)),
                              failure="mismatch", state=before)
                restart = True
        starting = restart or not before["running"]

        # validate v3 servers before anything changes
        servers = self.wanted_servers(before, starting)
        if servers is None:  # daemon keeps running: ask it
            servers = {}
            if params["namespaces"]:
                for server in mps.call("server_list"):
                    servers[server["name"]] = {"namespaces": {}}
                for name in set(ns["server"] for ns in params["namespaces"]):
                    if name in servers:
                        for row in mps.call("namespace_list", server=name):
                            servers[name]["namespaces"][row["namespace"]] = row
        for ns in params["namespaces"] or []:
            if ns["server"] not in servers:
                self.fail("unknown MPS server %r: the daemon has %s" % (
                    ns["server"], ", ".join(sorted(servers)) or "no named servers (declare them "
                    "in config_file)"), failure="unknown_server")

        # directories
        if self.ensure_directories(diff):
            changed = True

        # daemon
        if starting:
            changed = True
            if restart:
                self.commands.append(mps.command("quit"))
                if not self.module.check_mode:
                    mps.stop(timeout=params["timeout"])
            self.commands.append(mps.start_command(params["protocol"], params["multiuser"],
                                                   params["config_file"]))
            if not self.module.check_mode:
                mps.start(params["protocol"], params["multiuser"], params["config_file"],
                          timeout=params["timeout"])
            after.update({"running": True, "pid": None, "protocol": params["protocol"],
                          "multiuser": params["multiuser"], "config_file": params["config_file"],
                          "server_pids": [], "servers": [],
                          "default_active_thread_percentage": 100.0,
                          "default_pinned_mem_limits": dict((d, None) for d in devices),
                          "namespaces": {}})
            for name, server in (servers or {}).items():
                after["namespaces"][name] = [
                    {"namespace": ns_name, "active_thread_percentage": ns["active_thread_percentage"]}
                    for ns_name, ns in sorted(server["namespaces"].items())]
            current_pct = 100.0
            current_limits = dict((d, None) for d in devices)
        else:
            current_pct = before["default_active_thread_percentage"]
            current_limits = before["default_pinned_mem_limits"]

        # default active thread percentage
        pct = params["default_active_thread_percentage"]
        if pct is not None and current_pct != float(pct):
            changed = True
            self.send("set_default_active_thread_percentage", percentage=pct)
            after["default_active_thread_percentage"] = float(pct)

        # pinned memory limits
        for device in devices:
            text, mib = limits[device]
            if current_limits.get(device) != mib:
                changed = True
                self.send("set_default_device_pinned_mem_limit", device=device, limit=text)
                after["default_pinned_mem_limits"][device] = mib

        sent_defaults = [c for c in self.commands if "set_default" in (c["stdin"] or "")]
        if sent_defaults and not starting and before["server_pids"]:
            self.warnings.append("MPS servers already run (%s): default settings apply to servers "
                                 "started from now on" % ", ".join(map(str, before["server_pids"])))

        # namespaces
        if params["namespaces"]:
            if starting and not self.module.check_mode:
                servers = {}
                for name in set(ns["server"] for ns in params["namespaces"]):
                    servers[name] = {"namespaces": dict(
                        (row["namespace"], row) for row in mps.call("namespace_list", server=name))}
            after.setdefault("namespaces", {})
            for ns in params["namespaces"]:
                existing = servers[ns["server"]]["namespaces"].get(ns["name"])
                if ns["state"] == "absent":
                    if existing is not None:
                        changed = True
                        self.send("namespace_delete", server=ns["server"], name=ns["name"])
                    continue
                if existing is None:
                    changed = True
                    self.send("namespace_create", server=ns["server"], name=ns["name"],
                              percentage=ns["active_thread_percentage"])
                elif float(existing["active_thread_percentage"]) != float(ns["active_thread_percentage"]):
                    changed = True
                    self.send("namespace_set", server=ns["server"], name=ns["name"],
                              percentage=ns["active_thread_percentage"])

        if self.module.check_mode:
            for ns in params["namespaces"] or []:
                spaces = after["namespaces"].setdefault(ns["server"], [])
                spaces[:] = [s for s in spaces if s.get("namespace") != ns["name"]]
                if ns["state"] == "present":
                    spaces.append({"namespace": ns["name"],
                                   "active_thread_percentage": ns["active_thread_percentage"]})
        else:
            after = mps.read_state(devices=devices,
                                   servers=sorted(set(ns["server"] for ns in params["namespaces"] or [])),
                                   clients=False, named_servers=v3_details)
        diff["after"] = {"daemon": after, "directories": self.directory_facts()}
        self.finish(changed, before, after, diff)

    def mismatch(self, state):
        wanted = {"protocol": self.params["protocol"], "multiuser": self.params["multiuser"],
                  "config_file": self.params["config_file"]}
        differences = []
        for key, value in wanted.items():
            if state[key] != value:
                differences.append("%s %s (wanted %s)" % (key, state[key], value))
        return differences

    def send(self, verb, **params):
        self.commands.append(self.mps.command(verb, **params))
        if not self.module.check_mode:
            self.mps.call(verb, **params)

    def finish(self, changed, before, after, diff):
        for warning in self.warnings:
            self.module.warn(warning)
        result = {"changed": changed, "commands": self.commands, "state": after}
        if self.module._diff:
            result["diff"] = diff
        self.module.exit_json(**result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["present", "absent"], default="present"),
            pipe_directory=dict(type="path", default="/tmp/nvidia-mps"),
            log_directory=dict(type="path", default="/var/log/nvidia-mps"),
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
            timeout=dict(type="int", default=30),
        ),
        supports_check_mode=True,
    )
    Converger(module).run()


if __name__ == "__main__":
    main()
