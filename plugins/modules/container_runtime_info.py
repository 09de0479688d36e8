#!/usr/bin/python
# -*- coding: utf-8 -*-
# Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: container_runtime_info
short_description: Read a node's container runtime paths and containerd's version and config in one run
version_added: 0.1.0
description:
  - Reads what the gpu-fractioning agents need of containerd on a node, in one module run. That is the CRI
    socket (or, on MicroK8s, the link to it and the socket it points to), the NRI socket, containerd's
    version (C(containerd --version)), its configuration file, and whether MicroK8s' folder or k3s/RKE2's
    socket exist.
  - Each path is returned with the keys of C(ansible.builtin.stat) that tell what it is (RV(cri.stat) with
    C(exists), C(issock), C(islnk), C(lnk_source), ...), the version as a command's C(rc), C(stdout) and
    C(stderr), the configuration as C(ansible.builtin.slurp) returns it, so the P(smshare.kai.preflight#role)
    role's rows read them unchanged. Nothing is judged here; a missing path, an unreadable configuration or a
    binary that cannot run is reported, not failed.
  - A path that cannot be looked at (permission denied, a symlink loop, a file where a folder should be) fails
    with RV(failure=unreadable), naming it, as C(ansible.builtin.stat) fails.
  - The sockets and the configuration are often readable by root only (C(become)).
extends_documentation_fragment:
  - smshare.kai.attributes
  - smshare.kai.attributes.info_module
options:
  cri_socket:
    description: containerd's CRI socket, or with O(cri_socket_link_target) the link to it.
    type: path
    default: /run/containerd/containerd.sock
  cri_socket_link_target:
    description:
      - The socket O(cri_socket) must link to (MicroK8s). Set, O(cri_socket) is read as a link (not
        followed) and this path as the socket; empty, O(cri_socket) is followed.
    type: path
  nri_socket:
    description: containerd's NRI socket.
    type: path
    default: /var/run/nri/nri.sock
  containerd_binary:
    description: containerd's binary (a name looked up on PATH, or a path), run with C(--version).
    type: str
    default: containerd
  containerd_config:
    description: containerd's configuration file.
    type: path
    default: /etc/containerd/config.toml
  microk8s_dir:
    description: The folder MicroK8s keeps containerd under.
    type: path
    default: /var/snap/microk8s
  k3s_cri_socket:
    description: The containerd socket of k3s and RKE2.
    type: path
    default: /run/k3s/containerd/containerd.sock
seealso:
  - module: smshare.kai.gpu_info
author:
  - smshare.kai maintainers (@smshare)
"""

EXAMPLES = r"""
- name: Read containerd on the node
  smshare.kai.container_runtime_info:
  become: true
  register: runtime

- name: The NRI socket is there
  ansible.builtin.assert:
    that: runtime.nri.stat.issock | default(false)
    fail_msg: containerd serves no NRI socket at /var/run/nri/nri.sock; enable NRI and restart containerd.
"""

RETURN = r"""
cri:
  description: O(cri_socket) as C(ansible.builtin.stat) returns it (followed unless O(cri_socket_link_target) is set).
  returned: success
  type: dict
  contains:
    stat:
      description: C(exists); for a path that exists C(islnk), C(issock), C(isreg), C(isdir), C(isfifo),
        C(ischr), C(isblk) and C(mode); for a link C(lnk_source) (the path it resolves to) and C(lnk_target).
      type: dict
cri_target:
  description: O(cri_socket_link_target) as C(ansible.builtin.stat) returns it; V({}) when it is not set.
  returned: success
  type: dict
nri:
  description: O(nri_socket) as C(ansible.builtin.stat) returns it.
  returned: success
  type: dict
microk8s:
  description: O(microk8s_dir) as C(ansible.builtin.stat) returns it.
  returned: success
  type: dict
k3s:
  description: O(k3s_cri_socket) as C(ansible.builtin.stat) returns it.
  returned: success
  type: dict
containerd_version:
  description: C(containerd --version) as a command's C(rc), C(stdout) and C(stderr) (trailing line breaks
    removed, as C(ansible.builtin.command) does); C(rc) null and C(msg) when it could not be run.
  returned: success
  type: dict
containerd_config:
  description: O(containerd_config) as C(ansible.builtin.slurp) returns it (C(content) in base64, C(encoding)),
    or C(msg) when it cannot be read.
  returned: success
  type: dict
failure:
  description: Name of the failure, bad_input (with RV(parameter)) or unreadable (with RV(path)).
  returned: failure
  type: str
parameter:
  description: The parameter a RV(failure=bad_input) refusal is about.
  returned: failure
  type: str
path:
  description: The path a RV(failure=unreadable) failure is about.
  returned: failure
  type: str
"""

import base64
import errno
import os
import stat as st

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.smshare.kai.plugins.module_utils import validate

PATHS = ("cri_socket", "nri_socket", "containerd_config", "microk8s_dir", "k3s_cri_socket")
KINDS = (("issock", st.S_ISSOCK), ("isreg", st.S_ISREG), ("isdir", st.S_ISDIR), ("isfifo", st.S_ISFIFO),
         ("ischr", st.S_ISCHR), ("isblk", st.S_ISBLK))


class Unreadable(Exception):
    def __init__(self, path, error):
        super(Unreadable, self).__init__("cannot look at %s: %s" % (path, error.strerror or error))
        self.path = path


def path_stat(path, follow):
    """The keys of ansible.builtin.stat the preflight rows read: exists, the kind, the link's source.
    Missing is an answer; any other error fails, as stat fails."""
    try:
        found = os.stat(path) if follow else os.lstat(path)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return {"stat": {"exists": False}}
        raise Unreadable(path, exc)
    info = {"exists": True, "islnk": st.S_ISLNK(found.st_mode), "mode": "%04o" % st.S_IMODE(found.st_mode)}
    for key, test in KINDS:
        info[key] = test(found.st_mode)
    if info["islnk"]:
        info["lnk_source"] = os.path.realpath(path)
        info["lnk_target"] = os.readlink(path)
    return {"stat": info}


def slurp(path):
    try:
        with open(path, "rb") as handle:
            return {"content": base64.b64encode(handle.read()).decode("ascii"), "encoding": "base64", "source": path}
    except (IOError, OSError) as exc:
        return {"msg": "cannot read %s: %s" % (path, exc), "source": path}


def version(module, binary):
    try:
        rc, out, err = module.run_command([binary, "--version"], handle_exceptions=False)
    except (IOError, OSError) as exc:
        return {"rc": None, "stdout": "", "stderr": "", "msg": "cannot run %s: %s" % (binary, exc)}
    return {"rc": rc, "stdout": out.rstrip("\r\n"), "stderr": err.rstrip("\r\n")}


def check_input(params):
    for name in PATHS:
        validate.path(name, params[name], "/run/containerd/containerd.sock")
    validate.path("cri_socket_link_target", params["cri_socket_link_target"],
                  "/var/snap/microk8s/common/run/containerd.sock", required=False)
    validate.text("containerd_binary", params["containerd_binary"], "containerd", positional=True)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            cri_socket=dict(type="path", default="/run/containerd/containerd.sock"),
            cri_socket_link_target=dict(type="path"),
            nri_socket=dict(type="path", default="/var/run/nri/nri.sock"),
            containerd_binary=dict(type="str", default="containerd"),
            containerd_config=dict(type="path", default="/etc/containerd/config.toml"),
            microk8s_dir=dict(type="path", default="/var/snap/microk8s"),
            k3s_cri_socket=dict(type="path", default="/run/k3s/containerd/containerd.sock"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    validate.refuse_bad_input(module, check_input)
    target = params["cri_socket_link_target"] or ""
    try:
        paths = dict(cri=path_stat(params["cri_socket"], follow=not target),
                     cri_target=path_stat(target, follow=False) if target else {},
                     nri=path_stat(params["nri_socket"], follow=False),
                     microk8s=path_stat(params["microk8s_dir"], follow=False),
                     k3s=path_stat(params["k3s_cri_socket"], follow=False))
    except Unreadable as exc:
        module.fail_json(msg="%s. Run it as root (become), or fix the path." % exc, failure="unreadable", path=exc.path)
    module.exit_json(changed=False, containerd_version=version(module, params["containerd_binary"]),
                     containerd_config=slurp(params["containerd_config"]), **paths)


if __name__ == "__main__":
    main()
