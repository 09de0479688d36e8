# Apache-2.0
"""What a fleet driver rollout costs beyond its waits.

On the lab's fleet (lab/labctl up --fleet --gpu-nodes N, GPU-node containers that are
Kubernetes Nodes): puts NODES nodes on branch 580 with the driver play, then
times playbooks/driver_upgrade.yml moving them to 615 in batches of BATCH and
reads its report. The waits are what the playbook cannot shorten: reboots,
drains, the fractioning agents leaving and coming back, the node getting
Ready. Nodes of a batch wait side by side, so the rollout's waiting time is
the sum over batches of the longest wait in each; the rest of the wall time is
the playbook's own (Ansible, kubernetes.core, the nvidia_driver role's apt
work), printed per node against the target of at most 15 s per node, with the
tasks that took longest. Of the playbook's own time, the package work is the
package tasks' time (apt, apt-get, apt-mark, dpkg; found by action in the two
roles' task files); the part of it apt spends in list refreshes and dpkg is also
stamped on the nodes by apt's own hooks (APT::Update and DPkg Pre-/Post-Invoke,
installed for the rollout and removed after). What remains, per node, is the
controller's time (target: at most 5 s per node in a batch). Prints figures
only; it never passes or fails on time.

    source scripts/env.sh && python3 benchmarks/fleet_rollout.py [--nodes 4] [--batch 2]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STATE = Path(os.environ.get("SMSHARE_LAB_STATE", REPO / ".lab"))
TARGET = 15.0
OWN_TARGET = 5.0
# apt runs these hooks (libapt, so the apt module's python-apt too) around each
# list refresh and each dpkg run; the benchmark's file, removed afterwards.
HOOKS = Path("/etc/apt/apt.conf.d/99smshare-bench-timing")
TIMES = "/var/log/smshare-bench-apt-times"
HOOK_TEXT = "".join('%s { "echo %s $(date +%%s.%%N) >> %s"; };\n' % (hook, word, TIMES) for hook, word in (
    ("APT::Update::Pre-Invoke", "update-start"), ("APT::Update::Post-Invoke", "update-end"),
    ("DPkg::Pre-Invoke", "dpkg-start"), ("DPkg::Post-Invoke", "dpkg-end")))


def sh(argv, env, check=True):
    proc = subprocess.run([str(a) for a in argv], cwd=REPO, env=env, text=True, check=False,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if check and proc.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(map(str, argv)), proc.stdout[-4000:]))
    return proc.stdout


def lab_env(count):
    """Bring the lab up with at least `count` GPU nodes (never fewer than it has)."""
    try:
        running = json.loads((STATE / "gpu-nodes.json").read_text())["count"]
    except (OSError, ValueError, KeyError):
        running = 0
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="false", NO_COLOR="1")
    sh([sys.executable, REPO / "lab" / "labctl", "up", "--fleet", "--gpu-nodes", max(count, running)], env)
    for line in sh([sys.executable, REPO / "lab" / "labctl", "env"], env).splitlines():
        match = re.match(r"export (\w+)=(.*)$", line)
        if match:
            env[match.group(1)] = match.group(2).strip("'")
    facts = json.loads((STATE / "lab.json").read_text())
    return env, facts


def adhoc(hosts, module, args, inventory, env):
    """{host: result} of one ad-hoc module run (ansible.posix's json callback)."""
    run_env = dict(env, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    out = sh(["ansible", ",".join(hosts), *inventory, "-m", module, "-a", args], run_env)
    return json.loads(out[out.index("{"):])["plays"][0]["tasks"][0]["hosts"]


def package_task_names():
    """The names (up to their first Jinja) of the tasks that do package work:
    the apt module and the commands that run apt-get, apt-mark or dpkg."""
    import yaml
    names = set()

    def walk(node, role):
        if isinstance(node, list):
            for item in node:
                walk(item, role)
        elif isinstance(node, dict):
            for key in ("block", "rescue", "always"):
                walk(node.get(key), role)
            action = next((k for k in node if k.startswith(("ansible.builtin.", "community."))), None)
            args = str(node.get(action))
            if action in ("ansible.builtin.apt", "ansible.builtin.deb822_repository") or (
                    action == "ansible.builtin.command" and re.search(r"\b(apt-get|apt-mark|dpkg)\b", args)):
                names.add("smshare.kai.%s : %s" % (role, node["name"].split("{{")[0].rstrip()))
    for role in ("nvidia_driver", "driver_upgrade"):
        for path in sorted((REPO / "roles" / role / "tasks").glob("*.yml")):
            walk(yaml.safe_load(path.read_text()), role)
    return names


def package_seconds(text, since, until):
    """(list refresh s, dpkg s) from one node's hook timestamps between since and until."""
    started, spent = {}, {"update": 0.0, "dpkg": 0.0}
    for kind, edge, stamp in re.findall(r"(update|dpkg)-(start|end) ([0-9.]+)", text):
        stamp = float(stamp)
        if not since <= stamp <= until:
            continue
        if edge == "start":
            started[kind] = stamp
        elif kind in started:
            spent[kind] += stamp - started.pop(kind)
    return spent["update"], spent["dpkg"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--show-tasks", type=int, default=15, help="how many of the longest other tasks to list")
    args = parser.parse_args()
    env, facts = lab_env(args.nodes)
    nodes = facts["gpu_nodes"][:args.nodes]
    kubectl = [facts["bin_dir"] + "/kubectl", "--kubeconfig", facts["kubeconfig"]]
    inventory = [arg for path in facts["inventory"] for arg in ("-i", path)]
    limit = ["-l", ",".join(nodes) + ",localhost"]

    print("putting %d nodes on branch 580 (driver play)" % len(nodes), flush=True)
    sh(["ansible-playbook", "playbooks/driver.yml", *inventory, *limit, "-e", "smshare_driver_branch=580"], env)
    for node in nodes:
        sh(kubectl + ["label", "node", node, "nvidia.com/gpu-driver-upgrade-state-", "smshare.kai/driver-upgrade-state-"], env)
        sh(kubectl + ["uncordon", node], env)

    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        extra = {"driver_upgrade_serial": args.batch, "driver_upgrade_max_unavailable": args.batch,
                 "driver_upgrade_report_file": str(report), "driver_upgrade_poll_interval": 1}
        run_env = dict(env, ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks", PROFILE_TASKS_TASK_OUTPUT_LIMIT="all")
        adhoc(nodes, "ansible.builtin.copy", json.dumps({"dest": str(HOOKS), "mode": "0644", "content": HOOK_TEXT}),
              inventory, env)
        print("upgrading them to 615 in batches of %d" % args.batch, flush=True)
        start, since = time.monotonic(), time.time()
        try:
            out = sh(["ansible-playbook", "playbooks/driver_upgrade.yml", *inventory, *limit,
                      "-e", json.dumps(extra)], run_env)
        finally:
            until = time.time()
            wall = time.monotonic() - start
            times = adhoc(nodes, "ansible.builtin.shell", "cat %s 2>/dev/null; true" % TIMES, inventory, env)
            adhoc(nodes, "ansible.builtin.file", "path=%s state=absent" % HOOKS, inventory, env)
            adhoc(nodes, "ansible.builtin.file", "path=%s state=absent" % TIMES, inventory, env)
        data = json.loads(report.read_text())
    packages = {node: package_seconds(times.get(node, {}).get("stdout", ""), since, until) for node in nodes}

    rows = {row["node"]: row for row in data["nodes"] if row["state"] != "skipped"}
    order = [row["node"] for row in data["nodes"] if row["node"] in rows]
    recap = out[out.find("TASKS RECAP"):] if "TASKS RECAP" in out else ""
    tasks = [line for line in recap.splitlines() if re.search(r"-{3,} [0-9.]+s$", line)]
    # profile_tasks times each task once per batch (the batch's hosts run it side by side).
    package_names = package_task_names()
    package_work = sum(float(re.search(r"([0-9.]+)s$", line).group(1)) for line in tasks
                       if any(line.startswith(name) for name in package_names))
    waits, hooked, position = 0.0, 0.0, 0
    for size in data["batches"]:
        batch = order[position:position + size]
        position += size
        waits += max(rows[n]["waited"] for n in batch)
        hooked += max(sum(packages[n]) for n in batch)
    upgraded = len(rows)
    own = wall - waits
    controller = own - package_work
    print("\nnode                   spent s  waited s  own s  apt lists s  dpkg s")
    for name in order:
        row = rows[name]
        own_node = row["seconds"] - row["waited"]
        print("%-22s %8.1f %9.1f %6.1f %12.1f %7.1f" % ((name, row["seconds"], row["waited"], own_node) + packages[name]))
    print("\nnodes upgraded            %d in batches %s" % (upgraded, ", ".join(map(str, data["batches"]))))
    print("playbook wall time        %.1f s (the rollout's own clock: %.1f s)" % (wall, data["wall_seconds"]))
    print("sum of waits              %.1f s (longest wait of each batch: reboots, drains, agents, readiness)" % waits)
    print("playbook's own time       %.1f s, %.1f s per node (target: at most %.0f s per node)"
          % (own, own / max(upgraded, 1), TARGET))
    print("per node, spent - waited  %.1f s on average"
          % (sum(r["seconds"] - r["waited"] for r in rows.values()) / max(upgraded, 1)))
    print("package work              %.1f s (the package tasks: apt, apt-get, apt-mark, dpkg; once per batch)"
          % package_work)
    print("  of it timed on the nodes %.1f s (longest of each batch: apt's list refreshes and dpkg runs)" % hooked)
    print("controller's own time     %.1f s, %.1f s per node (own time less package work; target: at most %.0f s"
          " per node)" % (controller, controller / max(upgraded, 1), OWN_TARGET))
    others = {}
    for line in tasks:
        name, seconds = re.match(r"(.*?) -{3,} ([0-9.]+)s$", line).groups()
        if not any(name.startswith(package) for package in package_names):
            others[name] = others.get(name, 0.0) + float(seconds)
    if others:
        print("\nlongest other tasks, summed over the batches (waits among them; %d tasks, %.1f s in all):"
              % (len(others), sum(others.values())))
        for name, seconds in sorted(others.items(), key=lambda item: -item[1])[:args.show_tasks]:
            print("  %6.2f s  %s" % (seconds, name))
    print("load average at the end    %s" % " ".join(open("/proc/loadavg").read().split()[:3]))


if __name__ == "__main__":
    main()
