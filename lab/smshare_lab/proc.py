"""Processes of the lab, tracked by PID files under .lab/run/."""
import os
import signal
import subprocess
import time
from pathlib import Path

from .paths import LOGS, RUN
from .util import LabError


def _pidfile(name):
    return RUN / f"{name}.pid"


def _cmdline(pid):
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None


def pid_of(name):
    """PID of the lab process `name` if it runs (and is still the program we started)."""
    path = _pidfile(name)
    try:
        pid_text, exe = path.read_text().split("\n", 2)[:2]
        pid = int(pid_text)
    except (OSError, ValueError):
        return None
    cmd = _cmdline(pid)
    if not cmd or os.fsdecode(cmd[0]) != exe:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return None
    except OSError:
        return None
    return pid


def start(name, argv, env=None, cwd=None, exe=None):
    """Start argv detached in its own session, output to .lab/logs/<name>.log.
    `exe`: the program the process ends up running when argv[0] execs another
    (nsenter ... -- PROGRAM): what pid_of checks."""
    RUN.mkdir(parents=True, exist_ok=True)
    LOGS.mkdir(parents=True, exist_ok=True)
    log = open(LOGS / f"{name}.log", "ab")
    proc = subprocess.Popen([str(a) for a in argv], stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)
    _pidfile(name).write_text(f"{proc.pid}\n{exe or argv[0]}\n")
    time.sleep(0.2)
    if proc.poll() is not None:
        raise LabError(f"{name} exited at once (rc={proc.returncode}); see {LOGS / (name + '.log')}:\n"
                       + log_tail(name))
    return proc.pid


def log_tail(name, lines=20):
    try:
        return "".join((LOGS / f"{name}.log").read_text(errors="replace").splitlines(True)[-lines:])
    except OSError:
        return ""


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    cmd = _cmdline(pid)
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return bool(cmd) and state != "Z"


def kill_pid(pid, timeout=15):
    """SIGTERM, then SIGKILL after `timeout` seconds."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    while _alive(pid):
        time.sleep(0.1)


def stop(name, timeout=15):
    pid = pid_of(name)
    if pid:
        kill_pid(pid, timeout)
    _pidfile(name).unlink(missing_ok=True)
    return pid is not None


def tracked():
    return sorted(p.stem for p in RUN.glob("*.pid")) if RUN.is_dir() else []
