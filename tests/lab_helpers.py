"""Helpers for the lab tests: recap parsing."""
import re


def recap(output, host="localhost"):
    """{'ok': n, 'changed': n, 'failed': n, ...} from a PLAY RECAP line for `host`."""
    for line in output.splitlines():
        if line.startswith(host + " ") and ":" in line:
            return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)}
    raise AssertionError(f"no PLAY RECAP line for {host} in:\n{output[-3000:]}")


def failures(text, after=25, limit=6000):
    """Each failed task of an ansible-playbook output: its TASK line, the failure
    and the lines after it (a long run's tail alone may not show them)."""
    lines, blocks, task = text.splitlines(), [], ""
    for index, line in enumerate(lines):
        if line.startswith("TASK ["):
            task = line
        elif line.startswith(("fatal: [", "failed: [")):
            blocks.append("\n".join([task] + lines[index:index + after]))
    return "\n".join(blocks)[:limit]


def describe(proc):
    failed = failures(proc.stdout)
    return (f"rc={proc.returncode}\n" + (f"failed tasks:\n{failed}\n" if failed else "")
            + f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-2000:]}")
