"""Small helpers: logging, commands, waiting."""
import os
import subprocess
import sys
import time


def say(msg):
    print(f"[lab {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(argv, check=True, capture=False, env=None, cwd=None, input_text=None, unset=()):
    """Run argv (a list, never a shell); raise with the output on failure.
    `env` adds to the environment, `unset` names variables to leave out."""
    full_env = {k: v for k, v in dict(os.environ, **(env or {})).items() if k not in unset}
    if full_env.get("SMSHARE_LAB_INSTANCE") == "auto":
        # the scripts (registry.sh, repo.sh) compute ports from the number this lab claimed
        from .paths import INSTANCE  # pylint: disable=import-outside-toplevel
        full_env["SMSHARE_LAB_INSTANCE"] = str(INSTANCE)
    res = subprocess.run(argv, cwd=cwd, env=full_env, text=True, input=input_text,
                         stdout=subprocess.PIPE if capture else None,
                         stderr=subprocess.PIPE if capture else None, check=False)
    if check and res.returncode != 0:
        raise LabError(f"command failed (rc={res.returncode}): {' '.join(map(str, argv))}\n"
                       f"{res.stdout or ''}{res.stderr or ''}")
    return res


def out(argv, check=True, env=None):
    return run(argv, check=check, capture=True, env=env).stdout


class LabError(RuntimeError):
    """A lab step failed; the message says what and how to fix it."""


def wait_for(predicate, timeout, what, interval=0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise LabError(f"timed out after {timeout}s waiting for {what}")


def die(msg):
    print(f"labctl: error: {msg}", file=sys.stderr)
    sys.exit(1)
