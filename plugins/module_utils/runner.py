# -*- coding: utf-8 -*-
# Apache-2.0
"""One small command runner for the collection's modules.

Argv lists only (never a shell), the binary resolved once with get_bin_path,
LC_ALL=C so output parses the same everywhere, and every call recorded with the
exact argv, stdin and environment overrides it used, so modules can return
what they ran (or, in check mode, what they would run).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ToolError(Exception):
    """A failed or unparsable call of a wrapped tool. `kind` names the failure
    (returned to users as `failure`); `result` is the CommandResult, if any."""

    def __init__(self, msg, result=None, kind="failed"):
        super(ToolError, self).__init__(msg)
        self.msg = msg
        self.result = result
        self.kind = kind

    def details(self):
        details = {"failure": self.kind}
        if self.result is not None:
            details.update(self.result.as_dict())
        return details


class CommandResult:
    """The outcome of one call: what ran and what came back."""

    def __init__(self, argv, stdin, env, rc, stdout, stderr):
        self.argv = argv
        self.stdin = stdin
        self.env = env
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr

    def as_dict(self):
        return {
            "cmd": list(self.argv),
            "stdin": self.stdin,
            "env": dict(self.env),
            "rc": self.rc,
            "stdout": self.stdout,
            "stderr": self.stderr,
        }


class CommandRunner:
    """Runs one tool. `path` is resolved once; a missing tool is None."""

    LOCALE = {"LC_ALL": "C", "LANG": "C", "LANGUAGE": "C"}

    def __init__(self, module, binary, env=None, opt_dirs=None):
        self.module = module
        self.binary = binary
        self.env = dict(env or {})
        self.path = module.get_bin_path(binary, required=False, opt_dirs=opt_dirs or [])
        self.calls = []

    @property
    def available(self):
        return self.path is not None

    def missing(self, hint):
        """The failure for a tool that is not installed: `<binary>_missing`."""
        return ToolError("%s is not installed: %s" % (self.binary, hint),
                         kind="%s_missing" % self.binary.replace("-", "_"))

    def command(self, args, stdin=None, env=None):
        """The record of a call without running it (for check mode)."""
        merged = dict(self.env)
        merged.update(env or {})
        return {"cmd": [self.path or self.binary] + [str(a) for a in args],
                "stdin": stdin, "env": merged}

    def run(self, args, stdin=None, env=None):
        """Run `binary args...`, writing `stdin` (a string) to its standard input."""
        if self.path is None:
            raise self.missing("it is not on PATH")
        merged = dict(self.env)
        merged.update(env or {})
        argv = [self.path] + [str(a) for a in args]
        environ = dict(self.LOCALE)
        environ.update(merged)
        rc, out, err = self.module.run_command(
            argv, data=stdin, binary_data=stdin is not None and stdin.endswith("\n"),
            environ_update=environ, check_rc=False)
        result = CommandResult(argv, stdin, merged, rc, out, err)
        self.calls.append(result)
        return result
