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
  - When it runs under MPS v3, the named servers of its configuration file, the namespaces
    of each with their active thread percentage and pinned memory limit (the guide's
    C(nvidia-cuda-mps-control -p 3 namespace list --server=shared)) and its clients
    (C(client list --format=csv,noheader)).
  - Under the legacy protocol 2, or when O(devices) is given, also its server PIDs, default
    active thread percentage and default pinned memory limits (legacy commands, which no
    source shows a protocol 3 daemon answering, are not sent to one unless asked).
  - Reports whether the installed tool supports MPS v3 at all (drivers before r615 do not), as
    the guide checks it (C(nvidia-cuda-mps-control -p 3 namespace --help) lists create, delete, get, list and set).
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
      - GPU indexes whose default pinned memory limit to read (0 to 1023), with the legacy
        C(get_default_device_pinned_mem_limit).
      - Omitted, V([0]) for a protocol 2 daemon and none for a protocol 3 one.
      - A GPU the daemon does not have fails with RV(failure=unknown_gpu).
    type: list
    elements: int
  servers:
    description:
      - MPS v3 server names whose namespaces to list. Omitted, every server of the daemon's
        configuration file; an empty list is refused.
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
  description: Whether the installed tool offers the MPS v3 namespace verbs; null when not installed.
  returned: always
  type: bool
v3_missing_verbs:
  description: The verbs of create, delete, get, list and set that C(namespace --help) does not list.
  returned: always
  type: list
  elements: str
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
      description: MPS v3 server names, from the daemon's configuration file (C(-a)).
      type: list
      elements: str
    default_active_thread_percentage:
      description: The default active thread percentage.
      type: float
    default_pinned_mem_limits:
      description: Device index to default pinned memory limit in MiB (null, no limit).
      type: dict
    namespaces:
      description: >-
        Server name to its namespaces (namespace, active_thread_percentage, pinned_memory_limit_mib: null
        when unlimited).
      type: dict
    clients:
      description: >-
        Client processes: under v3 pid, server, device (GPU UUID), namespace and command; under protocol 2
        pid and server_pid.
      type: list
      elements: dict
  sample:
    running: true
    pid: 4242
    protocol: 3
    multiuser: true
    config_file: /etc/nvidia-mps/mps-control.toml
    servers: [shared]
    server_pids: []
    default_active_thread_percentage: null
    default_pinned_mem_limits: {}
    namespaces:
      shared:
        - {namespace: default, active_thread_percentage: 10.0, pinned_memory_limit_mib: null}
        - {namespace: kai_0f6b1f3e1111aaaa_3b0f5103c3bc1162b16d, active_thread_percentage: 50.0,
           pinned_memory_limit_mib: null}
    clients:
      - {pid: 3167082, server: shared, device: GPU-cc97390c-c189-71f5-1bb7-5b0af481fa0d,
         namespace: kai_0f6b1f3e1111aaaa_3b0f5103c3bc1162b16d, command: deviceQuery}
commands:
  description: The commands sent to read the state, each with its argv (C(cmd)), stdin, rc, stdout and stderr.
  returned: success
  type: list
  elements: dict
failure:
  description: >-
    Name of the failure: bad_input (with RV(parameter)), nvidia_cuda_mps_control_missing, daemon_not_v3,
    not_running, permission_denied, unknown_server, unknown_gpu, unparsable (the message names the line),
    failed.
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
    if params["devices"] is not None:
        validate.items("devices", params["devices"], "[0]", minimum=0, each=mpslib.gpu_index)
    if params["servers"] is not None:
        validate.items("servers", params["servers"], "[shared] (omit servers to list every one)",
                       each=mpslib.server_name)
    return pipe, log


def read(mps, devices, servers):
    """The daemon's state; servers the daemon does not have are named as such."""
    daemon = mps.daemon()
    if servers and daemon["running"]:
        if daemon["protocol"] != 3:
            raise mpslib.MpsError("servers need MPS v3, but the daemon for %s runs protocol %s"
                                  % (mps.pipe_directory, daemon["protocol"]), kind="daemon_not_v3")
        known = sorted(mps.configured_servers(daemon["config_file"]) or {})
        unknown = [s for s in servers if known and s not in known]
        if unknown:
            raise mpslib.MpsError("unknown MPS server%s %s: the daemon's configuration has %s" % (
                "s" if len(unknown) > 1 else "", ", ".join(unknown), ", ".join(known)), kind="unknown_server")
    if devices is None:
        return mps.read_state(devices=[0], servers=servers)
    return mps.read_state(devices=devices, servers=servers, legacy=True)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            mpslib.ARGUMENT_SPEC,
            devices=dict(type="list", elements="int"),
            servers=dict(type="list", elements="str"),
        ),
        supports_check_mode=True,
    )
    result = {"changed": False, "installed": None, "v3_supported": None, "v3_missing_verbs": []}
    mps = None
    try:
        pipe, log = check_input(module.params)
        mps = mpslib.MpsControl(module, pipe, log)
        result["installed"] = mps.available
        if mps.available:
            support = mps.v3_support()
            result.update(v3_supported=support["supported"], v3_missing_verbs=support["missing"])
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
