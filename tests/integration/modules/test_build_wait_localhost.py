# Apache-2.0
"""smshare.kai.build_wait run by ansible on localhost: its arguments refused by name
before any status read, check mode waits for nothing, a finished job's result handed
back for the caller to judge (the fork_images role's use: tests/integration/images)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def build_wait(tmp_path, args, *extra):
    env = dict(os.environ, ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_INVENTORY="",
               ANSIBLE_ASYNC_DIR=str(tmp_path / "async"))
    env.pop("ANSIBLE_VAULT_PASSWORD_FILE", None)
    proc = subprocess.run(["ansible", "localhost", "-i", "localhost,", "-c", "local", "-e",
                           "ansible_python_interpreter=" + sys.executable, "-m", "smshare.kai.build_wait",
                           "-a", json.dumps(args), *extra], cwd=REPO, env=env, text=True, capture_output=True,
                          check=False)
    return proc, json.loads(proc.stdout.split("=>", 1)[1]) if "=>" in proc.stdout else {}


GOOD = {"jid": "j1", "log": "/nonexistent/build.log", "timeout": 5, "poll_interval": 1}


@pytest.mark.parametrize("args, words", [
    ({k: v for k, v in GOOD.items() if k != "jid"}, "build_wait: jid is required"),
    (dict(GOOD, timeout=0), "build_wait: timeout=0 must be 1 or more seconds"),
    (dict(GOOD, poll_interval="often"), "build_wait: poll_interval='often' is not int"),
    (dict(GOOD, report_interval=-5), "build_wait: report_interval=-5 must be 1 or more seconds"),
    (dict(GOOD, every=3), "Invalid options for smshare.kai.build_wait: every"),
    (dict(GOOD, jid="../../etc/passwd"), "is not a job id"),
    (dict(GOOD, jid=""), "build_wait: jid is required"),
    (dict(GOOD, log="build.log"), "must be an absolute path without control characters"),
    (dict(GOOD, log="/var/log/b\nuild.log"), "must be an absolute path without control characters"),
    (dict(GOOD, name="kai\rscheduler"), "must be one line of text"),
], ids=["no-jid", "zero-timeout", "word-interval", "negative-report", "unknown-option", "path-as-jid", "empty-jid",
        "relative-log", "newline-in-log", "carriage-return-in-name"])
def test_bad_arguments_are_refused_by_name(tmp_path, args, words):
    proc, result = build_wait(tmp_path, args)
    assert proc.returncode != 0 and words in result.get("msg", ""), proc.stdout + proc.stderr


def test_check_mode_waits_for_nothing(tmp_path):
    proc, _result = build_wait(tmp_path, GOOD, "--check")
    assert proc.returncode == 0 and proc.stdout.startswith("localhost | SKIPPED"), proc.stdout + proc.stderr


def test_a_job_nobody_started_is_handed_back_finished_and_unread(tmp_path):
    """async_status's own answer ('could not find job') is the caller's to judge: no rc."""
    (tmp_path / "async").mkdir()
    proc, result = build_wait(tmp_path, GOOD)
    assert proc.returncode == 0 and result["finished"] is True and "rc" not in result, proc.stdout
    assert proc.stdout.startswith("localhost | SUCCESS"), proc.stdout   # waiting changed nothing
    assert result["msg"] == "could not find job" and not result.get("failed")
