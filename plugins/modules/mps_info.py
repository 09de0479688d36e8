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
    input, v3 verbs as arguments after C(-p 3)); unknown or unparsable output fails
    and quotes it.
  - Bad input fails with RV(failure=bad_input), naming the parameter, the rule and
    an example.
author:
  - smshare.kai maintainers (@smshare)
extends_documentation_fragment:
  - smshare.kai.attributes
  - smshare.kai.attributes.info_module
  - smshare.kai.mps
options:
  devices:
    description:
      - GPU indexes whose default pinned memory limit to read (0 to 1023).
      - A GPU the daemon does not have fails with RV(failure=unknown_gpu).
    type: list
    elements: int
    default: [0]
  servers:
    description:
      - MPS v3 server names whose namespaces to list. Omitted, every named server; an empty
        list is refused.
      - A server the daemon does not have fails with RV(failure=unknown_server).
    type: list
    elements: str
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
    stale_pid_file:
      description: >-
        Whether the pid file names a process that is gone or is not the control daemon
        (a daemon that died without cleaning up).
      type: bool
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
  description: >-
    Name of the failure: bad_input (with RV(parameter)), nvidia_cuda_mps_control_missing, daemon_not_v3,
    not_running, permission_denied, unknown_server, unknown_gpu, unparsable, failed.
  returned: failure
  type: str
parameter:
  description: The parameter a RV(failure=bad_input) refusal is about.
  returned: failure
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.smshare.kai.plugins.module_utils import mps as mpslib
from ansible_collections.smshare.kai.plugins.module_utils import validate
from ansible_collections.smshare.kai.plugins.module_utils.runner import ToolError


def check_input(params):
    """Every rule on the parameters; raises BadInput."""
    pipe = validate.path("pipe_directory", params["pipe_directory"], mpslib.DEFAULT_PIPE_DIRECTORY)
    log = validate.path("log_directory", params["log_directory"], mpslib.DEFAULT_LOG_DIRECTORY)
    if os.path.lexists(pipe) and not os.path.isdir(pipe):
        raise validate.BadInput("pipe_directory", pipe, "exists and is not a directory", "/run/nvidia-mps")
    validate.items("devices", params["devices"], "[0]", minimum=0, each=mpslib.gpu_index)
    if params["servers"] is not None:
        validate.items("servers", params["servers"], "[shared] (omit servers to list every one)",
                       each=mpslib.server_name)
    return pipe, log


def read(mps, devices, servers):
    """The daemon's state; servers the daemon does not have are named as such."""
    state = mps.read_state(devices=devices, servers=servers)
    if servers and state["running"]:
        if state["protocol"] != 3:
            raise mpslib.MpsError("servers need MPS v3, but the daemon for %s runs protocol %s"
                                  % (mps.pipe_directory, state["protocol"]), kind="daemon_not_v3")
        known = [s["name"] for s in state["servers"]]
        unknown = [s for s in servers if s not in known]
        if unknown:
            raise mpslib.MpsError("unknown MPS server%s %s: the daemon has %s" % (
                "s" if len(unknown) > 1 else "", ", ".join(unknown), ", ".join(known) or "no named servers"),
                kind="unknown_server")
    return state


def main():
    module = AnsibleModule(
        argument_spec=dict(
            mpslib.ARGUMENT_SPEC,
            devices=dict(type="list", elements="int", default=[0]),
            servers=dict(type="list", elements="str"),
        ),
        supports_check_mode=True,
    )
    result = {"changed": False, "installed": None, "v3_supported": None}
    mps = None
    try:
        pipe, log = check_input(module.params)
        mps = mpslib.MpsControl(module, pipe, log)
        result["installed"] = mps.available
        if mps.available:
            result["v3_supported"] = mps.v3_supported()
        result["state"] = read(mps, module.params["devices"], module.params["servers"])
    except ToolError as exc:
        if mps is not None:
            result["commands"] = [c.as_dict() for c in mps.runner.calls]
        module.fail_json(msg=exc.msg, **dict(result, **exc.details()))
    except (IOError, OSError) as exc:  # the host refused a read (a directory we may not search)
        module.fail_json(msg="reading the MPS state failed: %s" % exc, failure="failed", **result)
    result["commands"] = [c.as_dict() for c in mps.runner.calls]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
