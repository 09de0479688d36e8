"""Helpers for the lab tests: recap parsing, failures, signals to a whole play, commands on a GPU node,
one module run on localhost."""
import json
import os
import re
import subprocess
from pathlib import Path


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


def module_on_localhost(lab, module, args, *flags):
    """`module` run once on localhost against the lab (`ansible -m`, as a play would run it; `flags` such
    as --check, --diff): its result as a dict."""
    argv = ["ansible", "localhost", "-m", module, "-a", json.dumps(args), *flags]
    env = dict(lab.env, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    proc = subprocess.run(argv, cwd=lab.root, env=env, text=True, capture_output=True, check=False)
    try:
        return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    except (ValueError, KeyError, IndexError):
        raise AssertionError(f"no module result:\n{proc.stdout}\n{proc.stderr}") from None


def describe(proc):
    failed = failures(proc.stdout)
    return (f"rc={proc.returncode}\n" + (f"failed tasks:\n{failed}\n" if failed else "")
            + f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-2000:]}")


def signal_tree(pid, sig):
    """Signal a process and all its descendants: ansible's workers call setsid(), so
    a signal to ansible-playbook's process group never reaches the module."""
    children = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    todo, tree = [pid], []
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, []))
    for member in reversed(tree):   # the module first, ansible-playbook last
        try:
            os.kill(member, sig)
        except ProcessLookupError:
            pass


def on_node(node, *argv):
    """A command inside a GPU-node container; its CompletedProcess (text, not checked)."""
    return subprocess.run(["podman", "exec", node, *argv], capture_output=True, text=True, check=False)
