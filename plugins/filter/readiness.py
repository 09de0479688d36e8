# -*- coding: utf-8 -*-
# Apache-2.0
"""The cluster roles' waits and their checks, one predicate each: {ok, rows, message}
from what the wait read; the wait's `until` reads ok, the assert after it asserts ok and
prints message (documentation: the .yml file of each filter beside this one). The rules
are module_utils/readiness.py."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.smshare.kai.plugins.module_utils import readiness as _readiness
from ansible_collections.smshare.kai.plugins.module_utils.plain import plain as _plain


def _after_read(func):
    """A predicate whose first argument may be a k8s_info result: when that read failed, its
    message says so instead of reporting the objects missing."""
    def predicate(value, *args, **kwargs):
        result = func(value, *args, **kwargs)
        return _readiness.after_failed_read(result, _readiness.read_failure(_plain(value)))
    predicate.__name__, predicate.__doc__ = func.__name__, func.__doc__
    return predicate


def _objects(name, value):
    """A list of API objects from a list or a kubernetes.core.k8s_info result."""
    if isinstance(value, dict):
        value = value.get("resources") or []
    if value is None:
        return []
    if not isinstance(value, list):
        raise AnsibleFilterError("%s: expected a list of objects or a k8s_info result, got %s"
                                 % (name, type(value).__name__))
    return _plain(value)


def _names(name, value):
    if value is None:
        return []
    if isinstance(value, str) or not isinstance(value, list):
        raise AnsibleFilterError("%s: expected a list of names, got %s" % (name, type(value).__name__))
    return [str(v) for v in value]


def driver_pods_ready(targets, ready_nodes, version, namespace, timeout, repository=""):
    return _readiness.driver_pods_ready(_names("driver_pods_ready", targets), _names("driver_pods_ready", ready_nodes),
                                        str(version), str(namespace), timeout, str(repository or ""))


def driver_reported(targets, nodes, version):
    return _readiness.driver_reported(_names("driver_reported", targets), _objects("driver_reported", nodes),
                                      str(version))


@_after_read
def mpsd_pods_gone(pods, namespace, timeout):
    return _readiness.mpsd_pods_gone(_objects("mpsd_pods_gone", pods), str(namespace), timeout)


class FilterModule(object):
    def filters(self):
        return {
            "driver_pods_ready": driver_pods_ready,
            "driver_reported": driver_reported,
            "mpsd_pods_gone": mpsd_pods_gone,
        }
