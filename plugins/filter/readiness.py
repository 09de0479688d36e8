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


def _first(name, value):
    """One object: itself, or the first of a list or a k8s_info result (None when there is none)."""
    if isinstance(value, dict) and "resources" not in value:
        return _plain(value)
    found = _objects(name, value)
    return found[0] if found else None


def _names(name, value):
    if value is None:
        return []
    if isinstance(value, str) or not isinstance(value, list):
        raise AnsibleFilterError("%s: expected a list of names, got %s" % (name, type(value).__name__))
    return [str(v) for v in value]


@_after_read
def deployments_available(deployments, namespace, timeout, hint="", pods=None, events=None):
    return _readiness.deployments_available(_objects("deployments_available", deployments), str(namespace),
                                            timeout, str(hint or ""), _objects("deployments_available", pods),
                                            _objects("deployments_available", events))


@_after_read
def kai_config_deployed(configs, namespace, release, timeout):
    return _readiness.kai_config_deployed(_objects("kai_config_deployed", configs), str(namespace), str(release),
                                          timeout)


@_after_read
def kai_config_dependencies(configs, timeout):
    return _readiness.kai_config_dependencies(_objects("kai_config_dependencies", configs), timeout)


def kai_config_sharing(configs, sharing_mode):
    return _readiness.kai_config_sharing(_objects("kai_config_sharing", configs), str(sharing_mode))


@_after_read
def fractioning_daemonsets_created(daemonsets, config, components, namespace, timeout, operators=None):
    return _readiness.fractioning_daemonsets_created(
        _objects("fractioning_daemonsets_created", daemonsets), _first("fractioning_daemonsets_created", config),
        _names("fractioning_daemonsets_created", components), str(namespace), timeout,
        _objects("fractioning_daemonsets_created", operators))


@_after_read
def fractioning_daemonsets_ready(daemonsets, config, pods, symptoms, namespace, cri_socket_path, nri_socket_path):
    return _readiness.fractioning_daemonsets_ready(
        _objects("fractioning_daemonsets_ready", daemonsets), _first("fractioning_daemonsets_ready", config),
        _objects("fractioning_daemonsets_ready", pods), _plain(symptoms or []), str(namespace),
        str(cri_socket_path), str(nri_socket_path))


@_after_read
def fractioning_config_ready(configs, release, namespace, timeout, settings=None):
    return _readiness.fractioning_config_ready(_objects("fractioning_config_ready", configs), str(release),
                                               str(namespace), timeout, _plain(settings or {}))


@_after_read
def fractioning_nodes_ready(nodes, config, timeout, condition=_readiness.NODE_CONDITION):
    return _readiness.fractioning_nodes_ready(_objects("fractioning_nodes_ready", nodes),
                                              _first("fractioning_nodes_ready", config), timeout, str(condition))


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
            "deployments_available": deployments_available,
            "kai_config_deployed": kai_config_deployed,
            "kai_config_dependencies": kai_config_dependencies,
            "kai_config_sharing": kai_config_sharing,
            "fractioning_daemonsets_created": fractioning_daemonsets_created,
            "fractioning_daemonsets_ready": fractioning_daemonsets_ready,
            "fractioning_config_ready": fractioning_config_ready,
            "fractioning_nodes_ready": fractioning_nodes_ready,
            "driver_pods_ready": driver_pods_ready,
            "driver_reported": driver_reported,
            "mpsd_pods_gone": mpsd_pods_gone,
        }
