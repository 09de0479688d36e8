# -*- coding: utf-8 -*-
# Apache-2.0
"""Jinja tests for roles' input checks: the same rules the modules apply
(plugins/module_utils/validate.py), so a role's preflight assert and a module
refuse the same values. Documentation: the .yml files beside this one."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.smshare.kai.plugins.module_utils import registry, validate


def safe_text(value):
    """A non-empty string without control characters or line breaks."""
    return validate.passes(validate.text, "value", value, example="")


def safe_argument(value):
    """safe_text that also does not start with '-' (a positional argument)."""
    return validate.passes(validate.text, "value", value, example="", positional=True)


def absolute_path(value):
    """An absolute, normalised path (no '.', '..' or '//')."""
    return validate.passes(validate.path, "value", value, example="")


def plain_url(value, schemes=("https", "http")):
    """An http(s) URL with a host and without user:password@."""
    return validate.passes(validate.url, "value", value, example="", schemes=tuple(schemes))


def git_url(value):
    """A URL git can clone from, without credentials (an SSH user name is fine)."""
    return validate.passes(validate.git_url, "value", value, example="")


def url_with_credentials(value):
    """A URL that carries user information (user:password@host)."""
    return validate.has_credentials(value)


def qualified_name(value):
    """A Kubernetes qualified name (label key, condition type): [dns-prefix/]name of at most 63 characters."""
    return validate.passes(validate.qualified_name, "value", value, example="")


def _parses(parse, value):
    try:
        parse(value)
    except registry.RegistryError:
        return False
    return True


def registry_path(value):
    """host[:port][/path] as images are pushed there: no scheme, credentials, tag or trailing slash."""
    return isinstance(value, str) and _parses(registry.parse_registry_path, value)


def image_reference(value):
    """An image reference host[:port]/path/name:tag or ...@sha256:<digest>, as the modules parse it."""
    return validate.passes(registry.check_image, "value", value, "", "")


class TestModule(object):
    def tests(self):
        return {
            "safe_text": safe_text,
            "safe_argument": safe_argument,
            "absolute_path": absolute_path,
            "plain_url": plain_url,
            "url_with_credentials": url_with_credentials,
            "git_url": git_url,
            "registry_path": registry_path,
            "image_reference": image_reference,
            "qualified_name": qualified_name,
        }
