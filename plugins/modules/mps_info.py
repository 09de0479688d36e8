#!/usr/bin/python
# -*- coding: utf-8 -*-
# Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: mps_info
short_description: Read the state of a CUDA MPS control daemon
version_added: 0.1.0
description:
  - Reports whether an MPS control daemon (C(nvidia-cuda-mps-control)) runs for a
    pipe directory, with its protocol version (2, or 3 for MPS v3), multi-user
    mode and configuration file (read from its pid file and command line).
  - When it runs, also its server PIDs, default active thread percentage,
    default pinned memory limits per device and clients; under MPS v3 the named
    servers and the namespaces of each with their active thread percentage (the
    guide's C(nvidia-cuda-mps-control -p 3 namespace list --server=shared)).
  - Reports whether the installed tool supports MPS v3 at all (drivers before r615 do not).
  - Every command is sent as the real tool expects (legacy commands on standard
    input, v3 verbs as arguments); unknown or unparsable output fails and quotes it.
author:
  - smshare.kai maintainers (@smshare)
options:
  pipe_directory:
    description: The daemon's C(CUDA_MPS_PIPE_DIRECTORY).
    type: path
    default: /tmp/nvidia-mps
  log_directory:
    description: The daemon's C(CUDA_MPS_LOG_DIRECTORY).
    type: path
    default: /var/log/nvidia-mps
  devices:
    description:
      - Device indexes whose default pinned memory limit to read.
    type: list
    elements: int
    default: [0]
  servers:
    description:
      - MPS v3 server names whose namespaces to list. Default, all named servers.
      - An unknown server fails with C(failure=unknown_server).
    type: list
    elements: str
attributes:
  check_mode:
    support: full
    description: Read-only.
  diff_mode:
    support: none
    description: Reports, changes nothing.
  idempotent:
    support: full
    description: Never changes anything.
seealso:
  - module: smshare.kai.mps_control
"""

EXAMPLES = r"""
- name: Read MPS state
  smshare.kai.mps_info:
  register: mps

- name: The shared server's namespaces (MPS v3)
  smshare.kai.mps_info:
    pipe_directory: /run/nvidia-mps
    servers: [shared]
  register: mps_v3

- name: The default namespace is capped at 10%
  ansible.builtin.assert:
    that: >-
      (mps_v3.state.namespaces.shared | selectattr('namespace', 'eq', 'default')
      | map(attribute='active_thread_percentage') | first) == 10
    fail_msg: The shared server's default namespace is not capped at 10%; check mpsd's configuration.
"""

RETURN = r"""
installed:
  description: Whether nvidia-cuda-mps-control is on PATH.
  returned: always
  type: bool
v3_supported:
  description: Whether the installed tool offers protocol 3 (MPS v3); null when not installed.
  returned: always
  type: bool
state:
  description: The daemon's state.
  returned: always
  type: dict
  contains:
    running:
      description: Whether a control daemon runs for O(pipe_directory).
      type: bool
    pid:
      description: Its PID.
      type: int
    protocol:
      description: 2 (legacy) or 3 (MPS v3).
      type: int
    multiuser:
      description: Whether it runs with C(-m).
      type: bool
    config_file:
      description: The TOML file it was started with (C(-a)).
      type: str
    server_pids:
      description: PIDs of its MPS servers.
      type: list
      elements: int
    servers:
      description: MPS v3 named servers (name, pid, uid, active_thread_percentage, status).
      type: list
      elements: dict
    default_active_thread_percentage:
      description: The default active thread percentage.
      type: float
    default_pinned_mem_limits:
      description: Device index to default pinned memory limit in MiB (null, no limit).
      type: dict
    namespaces:
      description: Server name to its namespaces (namespace, active_thread_percentage, pinned_memory_limit_mib, client_priority).
      type: dict
    clients:
      description: Client processes.
      type: list
      elements: dict
  sample:
    running: true
    pid: 4242
    protocol: 3
    multiuser: true
    config_file: /etc/nvidia-mps/mps-control.toml
    server_pids: [4250]
    default_active_thread_percentage: 100.0
    default_pinned_mem_limits: {"0": null}
    namespaces:
      shared:
        - {namespace: default, active_thread_percentage: 10, pinned_memory_limit_mib: null, client_priority: 0}
    clients: []
commands:
  description: The commands sent to read the state, each with its argv (C(cmd)), stdin, rc, stdout and stderr.
  returned: success
  type: list
  elements: dict
failure:
  description: Name of the failure (missing, not_running, permission_denied, unknown_server, unparsable, failed).
  returned: failure
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.smshare.kai.plugins.module_utils.mps import (
    MpsControl,
    MpsError,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            pipe_directory=dict(type="path", default="/tmp/nvidia-mps"),
            log_directory=dict(type="path", default="/var/log/nvidia-mps"),
            devices=dict(type="list", elements="int", default=[0]),
            servers=dict(type="list", elements="str"),
        ),
        supports_check_mode=True,
    )
    pipe_directory = module.params["pipe_directory"]
    if os.path.exists(pipe_directory) and not os.path.isdir(pipe_directory):
        module.fail_json(msg="pipe_directory %s exists and is not a directory" % pipe_directory,
                         failure="pipe_directory_not_a_directory")
    if any(device < 0 for device in module.params["devices"]):
        module.fail_json(msg="devices are GPU indexes (0 or more): %s" % module.params["devices"])
    mps = MpsControl(module, pipe_directory, module.params["log_directory"])
    result = {"changed": False, "installed": mps.available, "v3_supported": None}
    try:
        if mps.available:
            result["v3_supported"] = mps.v3_supported()
        state = mps.read_state(devices=module.params["devices"], servers=module.params["servers"])
        if module.params["servers"] and state["running"] and state["protocol"] != 3:
            module.fail_json(msg="servers need MPS v3, but the daemon for %s runs protocol %s"
                             % (pipe_directory, state["protocol"]), failure="not_v3", state=state,
                             **{k: v for k, v in result.items() if k != "changed"})
    except MpsError as exc:
        result.update(exc.details())
        module.fail_json(msg=exc.msg, **result)
    result["state"] = state
    result["commands"] = [c.as_dict() for c in mps.runner.calls]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
