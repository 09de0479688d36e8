"""Helpers for the lab tests: recap parsing."""
import re


def recap(output, host="localhost"):
    """{'ok': n, 'changed': n, 'failed': n, ...} from a PLAY RECAP line for `host`."""
    for line in output.splitlines():
        if line.startswith(host + " ") and ":" in line:
            return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)}
    raise AssertionError(f"no PLAY RECAP line for {host} in:\n{output[-3000:]}")


def describe(proc):
    return f"rc={proc.returncode}\nstdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-2000:]}"
