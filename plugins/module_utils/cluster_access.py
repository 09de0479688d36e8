# -*- coding: utf-8 -*-
# Apache-2.0
"""How the collection's own cluster modules reach the API server, written once.

The same two options as kubernetes.core's modules (`kubeconfig`, `context`),
so one `module_defaults` entry for the action group `smshare.kai.cluster` sets
them for every module of the group, beside kubernetes.core's groups."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import math
import os
import signal
import threading
import time
import traceback
from contextlib import contextmanager

from urllib.parse import quote

from ansible.module_utils.basic import missing_required_lib

# The one guarded import of the kubernetes library: the modules take its client
# and ApiException from here and call require_library() first.
try:
    from kubernetes import client as kube_client
    from kubernetes import config as kube_config
    from kubernetes.client.rest import ApiException
    from kubernetes.stream import stream as kube_stream
except ImportError:
    kube_client = kube_config = kube_stream = None
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()

    class ApiException(Exception):
        """Stands in the except clauses where the library is missing; never raised."""
else:
    KUBERNETES_IMPORT_ERROR = None

# A cluster module's options as kubernetes.core's: dict(ARGUMENT_SPEC, <its own>), as the MPS modules spread mps.ARGUMENT_SPEC.
ARGUMENT_SPEC = dict(
    kubeconfig=dict(type="path"),
    context=dict(type="str"),
)


def require_library(module, needed_for=""):
    """End the module run (failure=missing_library) where the kubernetes library is missing."""
    if KUBERNETES_IMPORT_ERROR:
        module.fail_json(msg=missing_required_lib("kubernetes") + (" (%s)" % needed_for if needed_for else ""),
                         exception=KUBERNETES_IMPORT_ERROR, failure="missing_library")


# Seconds one request of the collection's modules may take: a stopped API server
# must not hold a wait past its timeout.
REQUEST_TIMEOUT = 30


class AccessError(Exception):
    """The kubeconfig (or the pod's service account) gave no client."""


class Unanswered(Exception):
    """A call the API server gave no answer to (a refused connection, a timeout); a
    module that waits past refusals too raises it for those as well."""


def answered(call):
    """call()'s value; a call without an answer raises Unanswered, one the server
    refused its ApiException."""
    try:
        return call()
    except ApiException:
        raise
    except Exception as exc:  # pylint: disable=broad-except
        raise Unanswered(str(exc))


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


def plain_calls(client):
    """Whether `client` makes REST calls itself (the kubernetes library 35 and
    later): plain_json then spares a module the import of a typed API, which
    for CoreV1Api alone is about a second of a module run on a busy 2-core
    controller. Where it cannot, the caller uses the typed API."""
    return hasattr(client, "param_serialize") and hasattr(client, "call_api")


def plain_json(client, method, path, body=None, content_type="application/json", timeout=REQUEST_TIMEOUT):
    """One call to the API server through `client` (plain_calls(client) true),
    its answer as a dict. A status outside 2xx raises ApiException, as the
    typed APIs do, its `status`, `reason` and `body` set."""
    serialized = client.param_serialize(method=method, resource_path=path,
                                        header_params={"Accept": "application/json", "Content-Type": content_type},
                                        body=body, auth_settings=["BearerToken"])
    verb, url, headers, payload, post = serialized
    response = client.call_api(verb, url, header_params=headers, body=payload, post_params=post, _request_timeout=timeout)
    response.read()
    if not 200 <= response.status <= 299:
        raise ApiException(http_resp=response)
    return json.loads(response.data.decode("utf-8")) if response.data else {}


def plain_get(client, path, query=None):
    """plain_json's GET, with `query` ({name: value}, a selector's spaces and
    commas included) encoded into the path."""
    if query:
        path += "?" + "&".join("%s=%s" % (key, quote(str(value), safe="")) for key, value in sorted(query.items()))
    return plain_json(client, "GET", path)


def poll(step, timeout, interval, clock=time.monotonic, sleep=time.sleep):
    """A module's wait: step() returns (value, done); it is called until done or
    until `timeout` seconds have passed since the first call, `interval` seconds
    apart (at most what is left). Returns (the last value, seconds waited: 0 when
    the first call was done)."""
    start, waited = clock(), 0.0
    while True:
        value, done = step()
        if done or clock() - start >= timeout:
            return value, waited
        sleep(min(float(interval), max(0.0, timeout - (clock() - start))))
        waited = round(clock() - start, 1)


class ExecTimeout(Exception):
    """A command exec'd in a pod did not end within its timeout (`started`:
    `stdout` and `stderr` hold what it wrote by then), or the exec's connection
    got no answer (not `started`)."""

    def __init__(self, msg, stdout="", stderr="", started=False):
        super(ExecTimeout, self).__init__(msg)
        self.stdout, self.stderr, self.started = stdout, stderr, started


@contextmanager
def _deadline(seconds, what):
    """Raise ExecTimeout(what) out of the code run inside after `seconds`,
    whatever that code wraps the alarm's exception in (the kubernetes library
    makes every error of an exec an ApiException). The exec's websocket connects
    with no timeout of its own (the library ignores _request_timeout there): a
    server that accepts the connection and never answers would hold the module
    for good. Only a module's main thread can take SIGALRM; elsewhere nothing
    is bounded."""
    if not hasattr(signal, "SIGALRM") or threading.current_thread() is not threading.main_thread():
        yield
        return
    rang = []

    def ring(signum, frame):
        rang.append(signum)
        raise ExecTimeout(what)
    previous = signal.signal(signal.SIGALRM, ring)
    signal.alarm(max(1, int(math.ceil(seconds))))
    try:
        yield
    except Exception:
        if rang:
            raise ExecTimeout(what) from None
        raise
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def exec_in_pod(core, namespace, pod, command, container=None, timeout=REQUEST_TIMEOUT):
    """(stdout, stderr, returncode) of `command` in a container of a pod,
    through `core` (a CoreV1Api). The connection gets `timeout` seconds and the
    command `timeout` more: then ExecTimeout, with what the command wrote so far,
    never a wait past the caller's own timeout. The stream is closed in every case."""
    kwargs = dict(command=command, stderr=True, stdin=False, stdout=True, tty=False,
                  _preload_content=False, _request_timeout=timeout)
    if container:
        kwargs["container"] = container
    resp = None
    try:
        with _deadline(timeout, "no answer to the exec within %s s" % timeout):
            resp = kube_stream(core.connect_get_namespaced_pod_exec, pod, namespace, **kwargs)
        resp.run_forever(timeout=timeout)
        out, err = resp.read_stdout(timeout=0) or "", resp.read_stderr(timeout=0) or ""
        if resp.is_open():
            raise ExecTimeout("still running after %s s" % timeout, out, err, started=True)
        return out, err, resp.returncode
    finally:
        if resp is not None:
            resp.close()
