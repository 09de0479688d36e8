# -*- coding: utf-8 -*-
# Apache-2.0
"""Input rules shared by every module (and, through the test and filter
plugins, by every role): each check returns the value or raises BadInput with
a message that names the parameter, shows the value (redacted when secret),
states the rule and gives an example of a good value.

Modules check everything before their first change:

    try:
        validate.text("server", params["server"], pattern=NAME, example="shared")
    except validate.BadInput as exc:
        module.fail_json(msg=exc.msg, **exc.details())
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import posixpath
import re

from ansible.module_utils.six import string_types
from ansible.module_utils.six.moves.urllib.parse import urlsplit, urlunsplit

from ansible_collections.smshare.kai.plugins.module_utils.runner import ToolError

# C0 controls, DEL and the C1 range: none may reach a file, an argv or a stdin line.
CONTROL_RE = re.compile(u"[\x00-\x1f\x7f-\x9f]")
REDACTED = "<redacted>"


class BadInput(ToolError):
    """A parameter that breaks a rule; raised before anything changed."""

    def __init__(self, parameter, value, rule, example=None, secret=False):
        self.parameter = parameter
        self.rule = rule
        shown = REDACTED if secret else show(value)
        msg = "%s=%s: %s." % (parameter, shown, rule)
        if example is not None:
            msg += " For example: %s." % (example,)
        msg += " Nothing was changed."
        super(BadInput, self).__init__(msg, kind="bad_input")

    def details(self):
        details = super(BadInput, self).details()
        details["parameter"] = self.parameter
        return details


def refuse_bad_input(module, check, *args):
    """Run `check` (default argument: the module's params); a rule it finds
    broken ends the run with the BadInput's message and details, before
    anything is read or changed."""
    try:
        check(*(args or (module.params,)))
    except BadInput as exc:
        module.fail_json(msg=exc.msg, **exc.details())


def show(value):
    """A value as the user should read it: quoted, control characters escaped,
    URL credentials removed."""
    if isinstance(value, string_types):
        if "@" in value:
            value = redact_url(value)
        return repr(value.encode("unicode_escape").decode("ascii") if CONTROL_RE.search(value) else value)
    return repr(value)


def passes(check, *args, **kwargs):
    """Whether check(*args, **kwargs) accepts the value (the rule as a yes or no)."""
    try:
        check(*args, **kwargs)
    except BadInput:
        return False
    return True


# ---------------------------------------------------------------- text
def has_control(value):
    return isinstance(value, string_types) and CONTROL_RE.search(value) is not None


def text(parameter, value, example, pattern=None, rule=None, required=True, positional=False,
         max_length=None, secret=False):
    """A string without control characters (newlines included).

    pattern: a regular expression the whole value must match (re.fullmatch, so
    a trailing newline never slips past a `$`). positional: the value goes
    where a command takes arguments, so it may not start with '-'.
    """
    if value is None or value == "":
        if required:
            raise BadInput(parameter, value, "must be set (empty is not allowed)", example, secret)
        return value
    if not isinstance(value, string_types):
        raise BadInput(parameter, value, "must be a string", example, secret)
    if has_control(value):
        raise BadInput(parameter, value, "must not contain control characters or line breaks",
                       example, secret)
    if positional and value.startswith("-"):
        raise BadInput(parameter, value, "must not start with '-' (it would be read as an option)",
                       example, secret)
    if max_length is not None and len(value) > max_length:
        raise BadInput(parameter, value, "must be at most %d characters" % max_length, example, secret)
    if pattern is not None and re.fullmatch(pattern, value) is None:
        raise BadInput(parameter, value, rule or ("must match %s" % pattern), example, secret)
    return value


# A label key or condition type as the API validates it: an optional DNS
# subdomain prefix (253 characters at most) and '/', then a name of at most 63.
_DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_QUALIFIED_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"


def qualified_name(parameter, value, example):
    """A Kubernetes qualified name (label key, annotation key, condition type): [prefix/]name."""
    text(parameter, value, example)
    prefix, sep, name = value.rpartition("/")
    if (sep and (len(prefix) > 253 or not re.fullmatch(_DNS_SUBDOMAIN, prefix))) \
            or len(name) > 63 or not re.fullmatch(_QUALIFIED_NAME, name):
        raise BadInput(parameter, value, "must be a Kubernetes qualified name: an optional DNS prefix and '/', then "
                       "at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
                       example)
    return value


# ---------------------------------------------------------------- numbers
# A Kubernetes namespace's name (an RFC 1123 label).
NAMESPACE_RE = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"


# A Node's name (a DNS subdomain).
NODE_NAME_RE = r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?"


def node_name(parameter, value, example="gpu-node-1"):
    return text(parameter, value, example, pattern=NODE_NAME_RE, max_length=253,
                rule="must be a Node's name (lower case letters, digits, - and .)")


def namespace(parameter, value, example):
    return text(parameter, value, example, pattern=NAMESPACE_RE, max_length=63,
                rule="must be a namespace name (lower case letters, digits and -)")


def integer(parameter, value, example, minimum=None, maximum=None, required=True):
    if value is None:
        if required:
            raise BadInput(parameter, value, "must be set", example)
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInput(parameter, value, "must be a whole number", example)
    if minimum is not None and value < minimum or maximum is not None and value > maximum:
        if maximum is None:
            rule = "must be %d or more" % minimum
        elif minimum is None:
            rule = "must be %d or less" % maximum
        else:
            rule = "must be between %d and %d" % (minimum, maximum)
        raise BadInput(parameter, value, rule, example)
    return value


def port(parameter, value, required=True):
    return integer(parameter, value, "5000", minimum=1, maximum=65535, required=required)


# ---------------------------------------------------------------- paths
def path(parameter, value, example, required=True):
    """An absolute, normalised path: no '..' or '.' parts, no empty parts."""
    text(parameter, value, example, required=required)
    if value in (None, ""):
        return value
    if not value.startswith("/"):
        raise BadInput(parameter, value, "must be an absolute path", example)
    stripped = value.rstrip("/") or "/"
    if "//" in value or posixpath.normpath(stripped) != stripped:
        raise BadInput(parameter, value, "must be a normalised absolute path (no '.', '..' or '//')",
                       example)
    return stripped


def writable_file(parameter, value, example, required=True):
    """A path (as path()) where a file can be written now: not a folder, not a file that
    cannot be written, and under a folder that exists and can be written or can be made
    (its nearest existing parent a writable folder)."""
    value = path(parameter, value, example, required=required)
    if value in (None, ""):
        return value
    if os.path.isdir(value):
        raise BadInput(parameter, value, "is a folder, not a file to write", example)
    if os.path.lexists(value):
        if not os.path.isfile(value):
            raise BadInput(parameter, value, "exists and is not a regular file", example)
        if not os.access(value, os.W_OK):
            raise BadInput(parameter, value, "exists and cannot be written", example)
        return value
    parent = posixpath.dirname(value)
    while parent != "/" and not os.path.lexists(parent):
        parent = posixpath.dirname(parent)
    if not os.path.isdir(parent):
        raise BadInput(parameter, value, "cannot be made: %s is not a folder" % parent, example)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise BadInput(parameter, value, "cannot be written: the folder %s is not writable" % parent, example)
    return value


def mode(parameter, value, example="'0755'", required=True):
    """A file mode as a quoted octal string ('0755', '755', '1777'); returns its int.

    Numbers are refused: YAML reads 0755 as 493 but 755 as 755 (0o1363), and
    the two cannot be told apart once parsed.
    """
    if value is None or value == "":
        if required:
            raise BadInput(parameter, value, "must be set", example)
        return None
    if not isinstance(value, string_types):
        raise BadInput(parameter, value, "must be a quoted octal string (a bare number is ambiguous in YAML)",
                       example)
    text(parameter, value, example)
    if re.fullmatch(r"0?[0-7]{3,4}", value) is None:
        raise BadInput(parameter, value, "must be an octal mode of 3 or 4 digits", example)
    return int(value, 8)


# ---------------------------------------------------------------- lists
def items(parameter, value, example, minimum=1, each=None):
    """A list with at least `minimum` items; `each(name, item)` checks every item."""
    if not isinstance(value, list):
        raise BadInput(parameter, value, "must be a list", example)
    if len(value) < minimum:
        raise BadInput(parameter, value, "must list at least %d item%s" % (minimum, "" if minimum == 1 else "s"),
                       example)
    if each is not None:
        for index, item in enumerate(value):
            each("%s[%d]" % (parameter, index), item)
    return value


# ---------------------------------------------------------------- URLs
# git's scp-like syntax: [user[:password]@]host:path (no scheme).
SCP_LIKE_RE = re.compile(r"(?:(?P<userinfo>[^@/]+)@)?(?P<host>[A-Za-z0-9][A-Za-z0-9.-]*|\[[0-9A-Fa-f:.]+\])"
                         r":(?!//)(?P<path>.+)")

# userinfo@rest without a scheme, where the '@' comes before any '/' and does
# not introduce a digest (name@sha256:... is an image reference, not a login).
_BARE_USERINFO_RE = re.compile(r"(?P<userinfo>[^@/\s]+)@(?!(?:[a-z0-9]+(?:[+._-][a-z0-9]+)*):[0-9a-fA-F]{32,})"
                               r"(?P<rest>[^@]+)", re.S)


def redact_url(url):
    """The URL with any user information replaced by <redacted>."""
    if not isinstance(url, string_types) or "@" not in url:
        return url
    if "://" not in url:
        bare = _BARE_USERINFO_RE.fullmatch(url)
        return "%s@%s" % (REDACTED, bare.group("rest")) if bare else url
    try:
        parts = urlsplit(url)
    except ValueError:
        return re.sub(r"//[^/@]*@", "//%s@" % REDACTED, url)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, "%s@%s" % (REDACTED, host), parts.path, parts.query, parts.fragment))


def has_credentials(url):
    """User information in a URL, or before the host of a scheme-less
    reference (user:password@registry/path, user@host:path)."""
    if not isinstance(url, string_types):
        return False
    if "://" not in url:
        return _BARE_USERINFO_RE.fullmatch(url) is not None
    try:
        return "@" in urlsplit(url).netloc
    except ValueError:
        return "@" in url.split("/", 3)[2] if url.count("/") >= 2 else False


def _split_url(parameter, value, example, what):
    """urlsplit, with a bad port or malformed netloc refused as not `what`."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError on a bad port
        return parts
    except ValueError:
        raise BadInput(parameter, value, "must be %s" % what, example)


def url(parameter, value, example, schemes=("https", "http"), credentials_hint=None, required=True):
    """An absolute URL of one of `schemes` with a host and no user:password@.

    credentials_hint: where credentials go instead (named in the message).
    """
    text(parameter, value, example, required=required)
    if value in (None, ""):
        return value
    if has_credentials(value):
        hint = credentials_hint or "the module's username/password options or the tool's own credential store"
        raise BadInput(parameter, value, "must not carry credentials (user:password@); put them in %s" % hint,
                       example)
    parts = _split_url(parameter, value, example, "a URL")
    host = parts.hostname
    if parts.scheme not in schemes:
        raise BadInput(parameter, value, "must be a %s URL" % " or ".join(schemes), example)
    if not host or re.search(r"\s", value):
        raise BadInput(parameter, value, "must name a host", example)
    return value


GIT_HINT = ("a git credential helper (git config credential.helper) or an SSH key of the build host, "
            "never the URL")


def git_url(parameter, value, example, required=True):
    """A URL git clones from: https://, http://, git://, ssh://[user@]host/path,
    scp-like [user@]host:path, file:///path or an absolute path. User
    information is refused except an SSH user name without a password."""
    text(parameter, value, example, required=required, positional=True)
    if value in (None, ""):
        return value
    if "://" in value:
        parts = _split_url(parameter, value, example, "a git URL")
        host = parts.hostname
        if parts.scheme not in ("https", "http", "git", "ssh", "file"):
            raise BadInput(parameter, value, "must be an https, http, git, ssh or file URL", example)
        if "@" in parts.netloc and (parts.scheme != "ssh" or parts.password is not None):
            raise BadInput(parameter, value, "must not carry credentials (user:password@ or a token@); "
                           "put them in %s" % GIT_HINT, example)
        if parts.scheme == "file":
            if parts.netloc or not parts.path.startswith("/"):
                raise BadInput(parameter, value, "must be file:///absolute/path", example)
        elif not host or re.search(r"\s", value):
            raise BadInput(parameter, value, "must name a host", example)
        return value
    if value.startswith("/"):
        return path(parameter, value, example)
    scp = SCP_LIKE_RE.fullmatch(value)
    if scp is None:
        raise BadInput(parameter, value, "must be a git URL (https://host/path, ssh://host/path, "
                       "user@host:path, file:///path or an absolute path)", example)
    if scp.group("userinfo") and ":" in scp.group("userinfo"):
        raise BadInput(parameter, value, "must not carry a password (user:password@); put credentials in %s"
                       % GIT_HINT, example)
    return value
