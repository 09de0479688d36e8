# -*- coding: utf-8 -*-
# Apache-2.0
"""How the collection's own cluster modules reach the API server, written once.

The same two options as kubernetes.core's modules (`kubeconfig`, `context`),
so one `module_defaults` entry for the action group `smshare.kai.cluster` sets
them for every module of the group, beside kubernetes.core's groups."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import traceback

try:
    from kubernetes import client as kube_client
    from kubernetes import config as kube_config
    from kubernetes.stream import stream as kube_stream
except ImportError:
    kube_client = kube_config = kube_stream = None
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()
else:
    KUBERNETES_IMPORT_ERROR = None

ARGUMENT_SPEC = dict(
    kubeconfig=dict(type="path"),
    context=dict(type="str"),
)


# Seconds one request of the collection's modules may take: a stopped API server
# must not hold a wait past its timeout.
REQUEST_TIMEOUT = 30


class AccessError(Exception):
    """The kubeconfig (or the pod's service account) gave no client."""


def _default_kubeconfig():
    """KUBECONFIG (a path or a list of them) or ~/.kube/config, read now, not
    when the kubernetes library was imported; None when neither is there."""
    if os.environ.get("KUBECONFIG"):
        return os.environ["KUBECONFIG"]
    home = os.path.join(os.environ.get("HOME", "/"), ".kube", "config")
    return home if os.path.exists(home) else None


def api_client(kubeconfig=None, context=None):
    """An ApiClient from `kubeconfig` (or KUBECONFIG, or ~/.kube/config) and
    `context`; with none of those, the service account of the pod it runs in.
    Loading only: whether the server answers is the caller's first call."""
    if kube_config is None:
        raise AccessError("the kubernetes Python library is missing: %s" % KUBERNETES_IMPORT_ERROR)
    config_file = kubeconfig or _default_kubeconfig()
    if config_file or context:
        try:
            return kube_config.new_client_from_config(config_file=config_file, context=context)
        except Exception as exc:  # pylint: disable=broad-except
            raise AccessError("cannot load kubeconfig %s%s: %s" % (
                config_file or "(default)", " (context %s)" % context if context else "", exc))
    try:
        kube_config.load_incluster_config()
    except Exception as exc:  # pylint: disable=broad-except
        raise AccessError("no kubeconfig and not in a cluster: %s" % exc)
    return kube_client.ApiClient()


class ExecTimeout(Exception):
    """A command exec'd in a pod was still running at its timeout."""


def exec_in_pod(core, namespace, pod, command, container=None, timeout=REQUEST_TIMEOUT):
    """(stdout, stderr, returncode) of `command` in a container of a pod,
    through `core` (a CoreV1Api). The connection and the command get `timeout`
    seconds: a command still running then raises ExecTimeout, never a wait
    that outlives the caller's own timeout. The stream is closed in every case."""
    kwargs = dict(command=command, stderr=True, stdin=False, stdout=True, tty=False,
                  _preload_content=False, _request_timeout=timeout)
    if container:
        kwargs["container"] = container
    resp = None
    try:
        resp = kube_stream(core.connect_get_namespaced_pod_exec, pod, namespace, **kwargs)
        resp.run_forever(timeout=timeout)
        if resp.is_open():
            raise ExecTimeout("still running after %s s" % timeout)
        return resp.read_stdout(timeout=0) or "", resp.read_stderr(timeout=0) or "", resp.returncode
    finally:
        if resp is not None:
            resp.close()
