# Apache-2.0
"""Fleet-size figures: a no-op site.yml on the converged lab against
`ansible -m setup` on the same hosts, at 1, 4 and 8 GPU-node containers.

For each count it brings this clone's lab to that many GPU nodes (lab/labctl up
--nodes --gpu-nodes N), converges site.yml once (new nodes get the driver),
checks a re-run changes nothing, then times ROUNDS no-op site.yml runs and
ROUNDS `ansible -m setup` on every host of site.yml, interleaved, and prints the
medians and their ratio (target: at most 3x), and how the cost grows with the
node count (target: no faster than the count). With --settings it also times
the no-op run at the largest count under the settings that matter for a fleet
(forks, strategy, fact caching), each against ansible.cfg as it is.

Prints figures only; it never passes or fails on time. Leaves the lab up, back
at its usual count of GPU nodes (SMSHARE_LAB_GPU_NODES, default 2).

    source scripts/env.sh && python3 benchmarks/fleet_scale.py [--counts 1,4,8] [--rounds 3] [--settings]
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


def labctl(*args):
    proc = subprocess.run([sys.executable, str(REPO / "lab" / "labctl"), *args], cwd=REPO,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit("lab/labctl %s failed:\n%s%s" % (" ".join(args), proc.stdout[-3000:], proc.stderr[-3000:]))
    return proc.stdout


def lab_env(count):
    labctl("up", "--nodes", "--gpu-nodes", str(count))
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
    for key, value in re.findall(r"(\w+)=(\d+)", out.split("PLAY RECAP")[-1]):
        totals[key] = totals.get(key, 0) + int(value)
    return totals


def site(env, extra_env=None):
    argv = ["ansible-playbook", "site.yml", *shlex.split(env.get("SMSHARE_LAB_INVENTORY", ""))]
    seconds, proc = run(argv, dict(env, **(extra_env or {})))
    if proc.returncode != 0:
        sys.exit("site.yml failed:\n" + proc.stdout[-4000:])
    return seconds, recap(proc.stdout)


def setup(env):
    argv = ["ansible", HOSTS, *shlex.split(env.get("SMSHARE_LAB_INVENTORY", "")), "-m", "ansible.builtin.setup"]
    seconds, proc = run(argv, env)
    if proc.returncode != 0:
        sys.exit("ansible -m setup failed:\n" + proc.stdout[-4000:])
    return seconds


def noop(env, rounds, extra_env=None, with_setup=True):
    site_times, setup_times, totals = [], [], {}
    for _round in range(rounds):
        seconds, totals = site(env, extra_env)
        if totals.get("changed", 0):
            sys.exit("a re-run of site.yml changed something (%s): the lab is not converged" % totals)
        site_times.append(seconds)
        if with_setup:
            setup_times.append(setup(env))
    return site_times, setup_times, totals


def fmt(times):
    return ", ".join("%.1f" % t for t in times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="1,4,8")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settings", action="store_true", help="also time fleet settings at the largest count")
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]

    try:
        measure(counts, args)
    finally:
        labctl("up", "--nodes", "--gpu-nodes", os.environ.get("SMSHARE_LAB_GPU_NODES", "2"))
    return 0


def measure(counts, args):
    rows = []
    for count in counts:
        env = lab_env(count)
        seconds, totals = site(env)         # converge (new nodes get the driver)
        print("[%d GPU nodes] converge: %.0f s (changed=%d)" % (count, seconds, totals.get("changed", 0)), flush=True)
        site_times, setup_times, totals = noop(env, args.rounds)
        site_median, setup_median = statistics.median(site_times), statistics.median(setup_times)
        rows.append((count, site_median, setup_median, totals.get("ok", 0)))
        print("[%d GPU nodes] no-op site.yml: median %.1f s (%s), %d tasks ok on all hosts"
              % (count, site_median, fmt(site_times), totals.get("ok", 0)))
        print("[%d GPU nodes] ansible -m setup on %s: median %.1f s (%s)" % (count, HOSTS, setup_median, fmt(setup_times)))
        print("[%d GPU nodes] ratio site/setup: %.2fx (target <= 3x)" % (count, site_median / setup_median), flush=True)

    base_count, base_site, base_setup, _ok = rows[0]
    header = ("GPU nodes", "site s", "setup s", "ratio", "site growth", "node growth")
    print("\n%-10s %10s %10s %8s %14s %14s" % header)
    for count, site_s, setup_s, _ok in rows:
        print("%-10d %10.1f %10.1f %7.2fx %13.2fx %13.2fx"
              % (count, site_s, setup_s, site_s / setup_s, site_s / base_site, count / base_count))
    print("(target: ratio <= 3x; site growth no faster than node growth)")

    if args.settings:
        count = counts[-1]
        env = lab_env(count)
        with tempfile.TemporaryDirectory() as cache:
            variants = [
                ("ansible.cfg as it is", {}),
                ("forks=5 (Ansible's default)", {"ANSIBLE_FORKS": "5"}),
                ("forks=32", {"ANSIBLE_FORKS": "32"}),
                ("strategy=free", {"ANSIBLE_STRATEGY": "free"}),
                ("fact cache (smart, jsonfile)", {"ANSIBLE_GATHERING": "smart", "ANSIBLE_CACHE_PLUGIN": "jsonfile",
                                                  "ANSIBLE_CACHE_PLUGIN_CONNECTION": cache,
                                                  "ANSIBLE_CACHE_PLUGIN_TIMEOUT": "86400"}),
                ("fact cache off (gathering=implicit, memory)", {"ANSIBLE_GATHERING": "implicit",
                                                                 "ANSIBLE_CACHE_PLUGIN": "memory"}),
            ]
            print("\nno-op site.yml at %d GPU nodes, by setting (median of %d):" % (count, args.rounds))
            for label, extra in variants:
                if "jsonfile" in extra.values():
                    site(env, extra)        # fill the cache first
                site_times = noop(env, args.rounds, extra, with_setup=False)[0]
                print("  %-44s %6.1f s  (%s)" % (label, statistics.median(site_times), fmt(site_times)), flush=True)


if __name__ == "__main__":
    sys.exit(main())
