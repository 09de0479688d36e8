# -*- coding: utf-8 -*-
# Apache-2.0
"""Wait for a background build (an async job) and say how far it got while it
runs: documentation in plugins/modules/build_wait.py."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.smshare.kai.plugins.module_utils import build_progress

display = Display()

JOB_ID = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")   # async_wrapper's j<number>.<pid>
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
UNREAD_LIMIT = 3   # status reads that fail in a row (the host unreachable, say) before the wait ends
ARGS = {"jid": str, "log": str, "name": str, "timeout": int, "poll_interval": int, "report_interval": int}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGS)

    def _args(self):
        args = dict(self._task.args)
        args.setdefault("name", "the build")
        args.setdefault("report_interval", build_progress.REPORT_INTERVAL)
        for key, kind in ARGS.items():
            if key not in args or args[key] in (None, ""):
                raise AnsibleActionFail("build_wait: %s is required" % key)
            try:
                args[key] = kind(args[key])
            except (TypeError, ValueError):
                raise AnsibleActionFail("build_wait: %s=%r is not %s" % (key, args[key], kind.__name__))
        for key in ("timeout", "poll_interval", "report_interval"):
            if args[key] < 1:
                raise AnsibleActionFail("build_wait: %s=%d must be 1 or more seconds" % (key, args[key]))
        if not JOB_ID.match(args["jid"]):
            raise AnsibleActionFail("build_wait: jid=%r is not a job id (the async task's ansible_job_id, for "
                                    "example j123456789.4242)" % args["jid"])
        if not args["log"].startswith("/") or CONTROL.search(args["log"]):
            raise AnsibleActionFail("build_wait: log=%r must be an absolute path without control characters"
                                    % args["log"])
        if CONTROL.search(args["name"]):
            raise AnsibleActionFail("build_wait: name=%r must be one line of text" % args["name"])
        return args

    def _tail(self, log, task_vars):
        done = self._execute_module(module_name="ansible.builtin.command", module_args={
            "argv": ["tail", "-n", str(build_progress.TAIL_LINES), "--", log]}, task_vars=task_vars)
        return done.get("stdout_lines") or [] if done.get("rc") == 0 else []

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        if self._play_context.check_mode:
            result.update(skipped=True, msg="check mode: no build ran, none to wait for")
            return result
        args = self._args()
        host = task_vars.get("inventory_hostname", "?")
        # Where the job's status is, as ansible.builtin.async_status's action finds it.
        async_dir = self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async"))
        started = time.time()
        last_report = started
        unread = 0   # status reads in a row that failed: one such read does not end the wait
        while True:
            status = self._execute_module(module_name="ansible.legacy.async_status", task_vars=task_vars,
                                          module_args={"jid": args["jid"], "_async_dir": async_dir})
            elapsed = time.time() - started
            unread = unread + 1 if status.get("failed") and not status.get("finished") else 0
            if status.get("finished") or unread >= UNREAD_LIMIT:
                status["elapsed"] = int(elapsed)
                status["finished"] = bool(status.get("finished"))
                for key in ("invocation", "exception"):   # the command's own failure is the caller's to report
                    status.pop(key, None)
                result.update(status)
                result["failed"] = False   # the role's check says what failed, with the log's end
                result["changed"] = False   # the build task reported the change; waiting changes nothing
                return result
            if elapsed >= args["timeout"]:
                result.update(finished=0, elapsed=int(elapsed), failed=True, msg=(
                    "%s still runs after %d s (the timeout): its log on %s is %s" % (
                        args["name"], args["timeout"], host, args["log"])))
                return result
            if time.time() - last_report >= args["report_interval"]:
                last_report = time.time()
                display.display(build_progress.report(host, args["name"], elapsed,
                                                      self._tail(args["log"], task_vars)))
            time.sleep(min(args["poll_interval"], max(1, args["timeout"] - elapsed)))
