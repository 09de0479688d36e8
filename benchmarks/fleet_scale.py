# Apache-2.0
"""Fleet-size figures: a no-op site.yml on the converged lab against
`ansible -m setup` on the same hosts, at 1, 4 and 8 GPU-node containers.

For each count it brings this clone's lab to that many GPU nodes (lab/labctl up
--nodes --gpu-nodes N), converges site.yml once (new nodes get the driver),
then times ROUNDS no-op site.yml runs (a re-run that changes nothing is
required) and ROUNDS `ansible -m setup` on every host site.yml touches,
interleaved, and prints the medians, their ratio (target: at most 3x) and how
the cost grows with the node count (target: no faster than the count). Each
no-op run's time is split by role (profile_roles): the cluster's plays run once
on the controller whatever the fleet's size, nvidia_driver on every GPU node
(preflight mixes both). The node side alone is also
timed: a no-op playbooks/driver.yml against `ansible -m setup` on the GPU nodes.

With --settings it times that node side at the largest count under the
settings that matter for a fleet (forks, strategy, fact caching, interpreter
discovery, and Mitogen's strategy where SMSHARE_BENCH_MITOGEN names its
install, as scripts/bench.sh sets it), each against ansible.cfg as it is.

Prints figures only; it never passes or fails on time. Leaves the lab up, back
at its usual count of GPU nodes (SMSHARE_LAB_GPU_NODES, default 2).

    source scripts/env.sh && python3 benchmarks/fleet_scale.py [--counts 1,4,8] [--rounds 2] [--settings]
"""
import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOSTS = "gpu_nodes:build_hosts:k8s_controller"    # every host site.yml touches
# The role that runs on every GPU node and nowhere else (preflight mixes node and cluster checks).
NODE_ROLES = ("nvidia_driver",)


def labctl(*args):
    proc = subprocess.run([sys.executable, str(REPO / "lab" / "labctl"), *args], cwd=REPO,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit("lab/labctl %s failed:\n%s%s" % (" ".join(args), proc.stdout[-3000:], proc.stderr[-3000:]))
    return proc.stdout


def lab_env(count, node_tier=True):
    labctl("up", *(["--nodes"] if node_tier else []), "--gpu-nodes", str(count))
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="false", NO_COLOR="1")
    for line in labctl("env").splitlines():
        match = re.match(r"export (\w+)=(.*)$", line)
        if match:
            env[match.group(1)] = shlex.split(match.group(2))[0] if match.group(2) else ""
    return env


def run(argv, env):
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    return time.monotonic() - start, proc


def recap(out):
    totals = {}
    for key, value in re.findall(r"(\w+)=(\d+)", out.split("PLAY RECAP")[-1].split("ROLES RECAP")[0]):
        totals[key] = totals.get(key, 0) + int(value)
    return totals


def roles(out):
    """{role: seconds} from profile_roles' recap."""
    return {name: float(sec) for name, sec in
            re.findall(r"^([\w.]+) -+ ([\d.]+)s$", out.split("ROLES RECAP")[-1], re.M) if name != "total"}


def playbook(env, path, extra_env=None):
    argv = ["ansible-playbook", path, *shlex.split(env.get("SMSHARE_LAB_INVENTORY", ""))]
    profiled = dict(env, ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_roles", **(extra_env or {}))
    seconds, proc = run(argv, profiled)
    if proc.returncode != 0:
        sys.exit("%s failed:\n%s" % (path, proc.stdout[-4000:]))
    return seconds, proc.stdout


def setup(env, hosts=HOSTS):
    argv = ["ansible", hosts, *shlex.split(env.get("SMSHARE_LAB_INVENTORY", "")), "-m", "ansible.builtin.setup"]
    seconds, proc = run(argv, env)
    if proc.returncode != 0:
        sys.exit("ansible -m setup failed:\n" + proc.stdout[-4000:])
    return seconds


def noop(env, path, rounds, hosts, extra_env=None, with_setup=True):
    """ROUNDS no-op runs of PATH (each must change nothing), setup between them."""
    times, setup_times, split = [], [], {}
    for _round in range(rounds):
        seconds, out = playbook(env, path, extra_env)
        if recap(out).get("changed", 0):
            sys.exit("a re-run of %s changed something (%s): the lab is not converged" % (path, recap(out)))
        times.append(seconds)
        split = roles(out)
        if with_setup:
            setup_times.append(setup(env, hosts))
    return times, setup_times, split


def mitogen_env():
    """The settings that run a play under Mitogen's linear strategy, or None when it is not installed.
    Mitogen reads host key checking from Ansible's setting, not from the inventory's ssh arguments."""
    root = os.environ.get("SMSHARE_BENCH_MITOGEN")
    if not root or not (Path(root) / "ansible_mitogen" / "plugins" / "strategy").is_dir():
        return None
    return {"ANSIBLE_STRATEGY_PLUGINS": str(Path(root) / "ansible_mitogen" / "plugins" / "strategy"),
            "ANSIBLE_STRATEGY": "mitogen_linear", "PYTHONPATH": root, "ANSIBLE_HOST_KEY_CHECKING": "False"}


def fmt(times):
    return ", ".join("%.1f" % t for t in times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="1,4,8")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--settings", action="store_true", help="also time fleet settings at the largest count")
    parser.add_argument("--node-side", action="store_true",
                        help="only the node side: driver.yml against setup on the GPU nodes (no node tier, no site.yml)")
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]

    try:
        measure(counts, args)
    finally:
        labctl("up", "--nodes", "--gpu-nodes", os.environ.get("SMSHARE_LAB_GPU_NODES", "2"))
    return 0


def measure(counts, args):
    rows = []
    med = statistics.median
    if args.node_side:
        return measure_node_side(counts, args)
    for count in counts:
        env = lab_env(count)
        seconds, out = playbook(env, "site.yml")        # converge (new nodes get the driver)
        print("[%d GPU nodes] converge: %.0f s (changed=%d)" % (count, seconds, recap(out).get("changed", 0)), flush=True)
        site_t, setup_t, split = noop(env, "site.yml", args.rounds, HOSTS)
        node_t, node_setup_t, _split = noop(env, "playbooks/driver.yml", args.rounds, "gpu_nodes")
        node_roles = sum(v for k, v in split.items() if k in NODE_ROLES)
        rows.append((count, med(site_t), med(setup_t), med(node_t), med(node_setup_t)))
        print("[%d GPU nodes] no-op site.yml: median %.1f s (%s); setup on %s: %.1f s (%s): %.1fx"
              % (count, med(site_t), fmt(site_t), HOSTS, med(setup_t), fmt(setup_t), med(site_t) / med(setup_t)))
        print("[%d GPU nodes]   by role (last run): %s" % (count, ", ".join(
            "%s %.0f s" % (k, v) for k, v in sorted(split.items(), key=lambda kv: -kv[1]))))
        print("[%d GPU nodes]   node side in site.yml (%s): %.0f s; the cluster's plays and the rest: %.0f s"
              % (count, "+".join(NODE_ROLES), node_roles, med(site_t) - node_roles))
        print("[%d GPU nodes] no-op playbooks/driver.yml: median %.1f s (%s); setup on gpu_nodes: %.1f s (%s): %.1fx"
              % (count, med(node_t), fmt(node_t), med(node_setup_t), fmt(node_setup_t),
                 med(node_t) / med(node_setup_t)), flush=True)

    base = rows[0]
    print("\n%-9s %8s %8s %7s %8s %8s %7s %8s %8s" % (
        "GPU nodes", "site s", "setup s", "ratio", "driver s", "setup s", "ratio", "growth", "nodes"))
    for count, site_s, setup_s, node_s, node_setup_s in rows:
        print("%-9d %8.1f %8.1f %6.1fx %8.1f %8.1f %6.1fx %7.2fx %7.2fx" % (
            count, site_s, setup_s, site_s / setup_s, node_s, node_setup_s, node_s / node_setup_s,
            site_s / base[1], count / base[0]))
    if len(rows) > 1:
        last = rows[-1]
        added = last[0] - base[0]
        print("per added GPU node: site.yml +%.1f s, setup +%.1f s; driver.yml +%.1f s, setup on gpu_nodes +%.1f s"
              % ((last[1] - base[1]) / added, (last[2] - base[2]) / added,
                 (last[3] - base[3]) / added, (last[4] - base[4]) / added))
    print("(targets: ratio <= 3x; site growth no faster than node growth)")

    if args.settings:
        settings(counts[-1], args)


def measure_node_side(counts, args):
    """The part that grows with the fleet, alone: a converged driver.yml against setup on the GPU nodes."""
    med = statistics.median
    rows = []
    for count in counts:
        env = lab_env(count, node_tier=False)
        seconds, out = playbook(env, "playbooks/driver.yml")
        print("[%d GPU nodes] converge: %.0f s (changed=%d)" % (count, seconds, recap(out).get("changed", 0)), flush=True)
        node_t, node_setup_t, _split = noop(env, "playbooks/driver.yml", args.rounds, "gpu_nodes")
        rows.append((count, med(node_t), med(node_setup_t)))
        print("[%d GPU nodes] no-op playbooks/driver.yml: median %.1f s (%s); setup on gpu_nodes: %.1f s (%s): %.1fx"
              % (count, med(node_t), fmt(node_t), med(node_setup_t), fmt(node_setup_t),
                 med(node_t) / med(node_setup_t)), flush=True)
    print("\n%-9s %8s %8s %7s" % ("GPU nodes", "driver s", "setup s", "ratio"))
    for count, node_s, setup_s in rows:
        print("%-9d %8.1f %8.1f %6.1fx" % (count, node_s, setup_s, node_s / setup_s))
    if len(rows) > 1:
        added = rows[-1][0] - rows[0][0]
        grow, grow_setup = (rows[-1][1] - rows[0][1]) / added, (rows[-1][2] - rows[0][2]) / added
        print("per added GPU node: driver.yml +%.2f s, setup +%.2f s: %.1fx (target: at most 1.5x)"
              % (grow, grow_setup, grow / grow_setup if grow_setup > 0 else float("inf")))
    print("(target: ratio <= 2x)")
    if args.settings:
        settings(counts[-1], args, node_tier=False)


def settings(count, args, node_tier=True):
    """The node side at COUNT GPU nodes under each setting that matters for a fleet."""
    med = statistics.median
    env = lab_env(count, node_tier)
    with tempfile.TemporaryDirectory() as cache:
        variants = [
            ("ansible.cfg as it is", {}),
            ("forks=5 (Ansible's default)", {"ANSIBLE_FORKS": "5"}),
            ("forks=32", {"ANSIBLE_FORKS": "32"}),
            ("strategy=free", {"ANSIBLE_STRATEGY": "free"}),
            ("interpreter set (no discovery)", {"ANSIBLE_PYTHON_INTERPRETER": "/usr/bin/python3"}),
            ("fact cache (smart, jsonfile)", {"ANSIBLE_GATHERING": "smart", "ANSIBLE_CACHE_PLUGIN": "jsonfile",
                                              "ANSIBLE_CACHE_PLUGIN_CONNECTION": cache,
                                              "ANSIBLE_CACHE_PLUGIN_TIMEOUT": "86400"}),
        ]
        mitogen = mitogen_env()
        if mitogen:
            variants.append(("Mitogen (mitogen_linear)", mitogen))
        else:
            print("(Mitogen not timed: set SMSHARE_BENCH_MITOGEN to where requirements/bench.txt is installed;"
                  " scripts/bench.sh does)")
        print("\nno-op playbooks/driver.yml (the part that grows with the fleet) at %d GPU nodes, "
              "by setting (median of %d):" % (count, args.rounds))
        for label, extra in variants:
            if "jsonfile" in extra.values():
                playbook(env, "playbooks/driver.yml", extra)        # fill the cache first
            times = noop(env, "playbooks/driver.yml", args.rounds, "gpu_nodes", extra, with_setup=False)[0]
            print("  %-36s %6.1f s  (%s)" % (label, med(times), fmt(times)), flush=True)


if __name__ == "__main__":
    sys.exit(main())
