# -*- coding: utf-8 -*-
# Apache-2.0
"""The nvidia_driver role's input rules that its argument_specs cannot
express, as one function: the role checks them in one task per host (a
task of its own for each rule cost a worker per host, 14 of them about 0.16 s
per node on a no-op run), and every rule is tested here alone.

problems(values) returns the messages of the rules broken, in the role's
order; each names the variable, shows the value (never a secret), states the
rule, gives an example and ends "Nothing was changed.". An unset optional
variable is absent from `values`.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible.module_utils.six import string_types

from ansible_collections.smshare.kai.plugins.module_utils import validate

MIRROR_EXAMPLE = "https://mirror.example.com/compute/cuda/repos"
# apt's auth.conf separates its fields with white space.
ONE_WORD = r"[!-~]+"
DEBIAN_VERSION = r"[0-9][A-Za-z0-9.+~]*(-[A-Za-z0-9.+~]+)?"


def is_set(values, name):
    return name in values


def as_int(value):
    """Jinja's `int` filter: a whole number, a float's whole part, else 0."""
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return 0


def _message(name, value, rule, example, secret=False):
    return validate.BadInput(name, value, rule, example, secret=secret).msg


def _fullmatch(pattern, value):
    """Ansible's regex test: the value as text (a number from a vault variable, None as "None")."""
    return re.fullmatch(pattern, value if isinstance(value, string_types) else str(value)) is not None


def _command(values, name, rule, example):
    value = values[name]
    if not (validate.passes(validate.text, name, value, example="") and value.strip()):
        return _message(name, value, rule, example)
    return None


def _mirror(values):
    """The mirror URL and its login: at most one message per concern."""
    found = []
    url_set = is_set(values, "nvidia_driver_repo_mirror_url")
    user_set = is_set(values, "nvidia_driver_repo_mirror_username")
    password_set = is_set(values, "nvidia_driver_repo_mirror_password")
    url = values.get("nvidia_driver_repo_mirror_url")
    url_ok = True
    if url_set:
        name = "nvidia_driver_repo_mirror_url"
        if validate.has_credentials(url):
            found.append(_message(name, url, "must not carry credentials (user:password@); put them in "
                                  "nvidia_driver_repo_mirror_username and nvidia_driver_repo_mirror_password "
                                  "(a vault variable)", MIRROR_EXAMPLE))
            url_ok = False
        elif not validate.passes(validate.url, name, url, example=""):
            found.append(_message(name, url, "must be an http or https URL naming a host, without control "
                                  "characters (for NVIDIA's own repository, leave it unset)", MIRROR_EXAMPLE))
            url_ok = False
    if user_set != password_set or (user_set and not url_set):
        found.append("nvidia_driver_repo_mirror_username and nvidia_driver_repo_mirror_password: must be set "
                     "together, and only with nvidia_driver_repo_mirror_url (set now: username %s, password %s, "
                     "mirror %s). For example: nvidia_driver_repo_mirror_username: cuda-reader with "
                     "nvidia_driver_repo_mirror_password: \"{{ vault_cuda_mirror_password }}\". Nothing was changed."
                     % (user_set, password_set, url_set))
    if password_set and url_set and url_ok and not validate.passes(validate.url, "url", url, example="", schemes=("https",)):
        found.append(_message("nvidia_driver_repo_mirror_url", url, "must be an https URL when "
                              "nvidia_driver_repo_mirror_password is set (over http the login would cross the "
                              "network in clear)", MIRROR_EXAMPLE))
    if user_set and not _fullmatch(ONE_WORD, values["nvidia_driver_repo_mirror_username"]):
        found.append(_message("nvidia_driver_repo_mirror_username", values["nvidia_driver_repo_mirror_username"],
                              "must be printable characters without spaces or control characters (apt's "
                              "auth.conf format)", "cuda-reader"))
    if password_set and not _fullmatch(ONE_WORD, values["nvidia_driver_repo_mirror_password"]):
        found.append(_message("nvidia_driver_repo_mirror_password", None,
                              "must be printable characters without spaces or control characters (apt's "
                              "auth.conf format)", "a vault variable holding the mirror's token", secret=True))
    return found


def problems(values, is_file=os.path.isfile):
    """The messages of every rule `values` (the role's variables by name) breaks.

    is_file: how a controller path is checked (os.path.isfile; tests pass their own).
    """
    found = []
    branch = values.get("nvidia_driver_branch")
    if as_int(branch) < 1:
        found.append(_message("nvidia_driver_branch", branch, "must be a driver branch number (1 or more)", "615"))
    if is_set(values, "nvidia_driver_version"):
        version = values["nvidia_driver_version"]
        number = as_int(branch)
        if not _fullmatch(r"%d\.[0-9]+(\.[0-9]+)?" % number, version):
            found.append(_message("nvidia_driver_version", version, "must be an upstream version of branch %s "
                                  "(no Debian revision)" % branch, "%d.71.09" % number))
    found.extend(_mirror(values))
    if is_set(values, "nvidia_driver_keyring_deb"):
        deb = values["nvidia_driver_keyring_deb"]
        if not (validate.passes(validate.text, "deb", deb, example="") and _fullmatch(r".*\.deb", deb) and is_file(deb)):
            found.append(_message("nvidia_driver_keyring_deb", deb, "must be an existing .deb file on the controller",
                                  "files/cuda-keyring_1.1-1_all.deb"))
    keyring_version = values.get("nvidia_driver_keyring_version")
    if not _fullmatch(DEBIAN_VERSION, keyring_version):
        found.append(_message("nvidia_driver_keyring_version", keyring_version,
                              "must be a Debian version of cuda-keyring", "1.1-1"))
    timeout = values.get("nvidia_driver_reboot_timeout")
    if as_int(timeout) < 1:
        found.append(_message("nvidia_driver_reboot_timeout", timeout, "must be 1 second or more", "900"))
    if is_set(values, "nvidia_driver_reboot_command"):
        found.append(_command(values, "nvidia_driver_reboot_command",
                              "must be a non-empty command line without control characters (for the reboot "
                              "module's own, leave it unset)", "systemctl reboot"))
    if is_set(values, "nvidia_driver_reboot_boot_time_command"):
        found.append(_command(values, "nvidia_driver_reboot_boot_time_command",
                              "must be a non-empty command line without control characters whose output changes "
                              "with each boot (for the reboot module's own, leave it unset)",
                              "cat /proc/sys/kernel/random/boot_id"))
    settle = values.get("nvidia_driver_fabricmanager_settle_seconds")
    if not 0 <= as_int(settle) <= 600:
        found.append(_message("nvidia_driver_fabricmanager_settle_seconds", settle, "must be between 0 and 600", "3"))
    return [message for message in found if message]
