# Apache-2.0
"""Wall time of the cluster plays on a converged lab: what a platform team pays
to re-check a running install (preflight, kai_scheduler, gpu_fractioning, each
whole and its checks alone), and how many tasks each ran.

Brings this clone's lab up with its node tier (lab/labctl up --nodes) and
converges site.yml once if the two releases are not deployed yet; leaves the
lab up. Prints figures, never passes or fails on time.

    source scripts/env.sh && python benchmarks/cluster_rerun.py
"""
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUNS = [
    ("preflight", "playbooks/preflight.yml", []),
    ("kai_scheduler", "playbooks/kai_scheduler.yml", []),
    ("kai_scheduler checks", "playbooks/kai_scheduler.yml", ["--tags", "kai_scheduler_verify"]),
    ("gpu_fractioning", "playbooks/gpu_fractioning.yml", []),
    ("gpu_fractioning checks", "playbooks/gpu_fractioning.yml", ["--tags", "gpu_fractioning_verify"]),
]


def lab_env():
    subprocess.run([sys.executable, str(REPO / "lab" / "labctl"), "up", "--nodes"], check=True,
                   capture_output=True, text=True)
    exports = subprocess.run([sys.executable, str(REPO / "lab" / "labctl"), "env"], check=True,
                             capture_output=True, text=True).stdout
    env = dict(os.environ)
    for line in exports.splitlines():
        match = re.match(r"export (\w+)=(.*)$", line)
        if match:
            env[match.group(1)] = shlex.split(match.group(2))[0] if match.group(2) else ""
    return env


def play(env, playbook, extra):
    argv = ["ansible-playbook", playbook, *shlex.split(env.get("SMSHARE_LAB_INVENTORY", "")), *extra]
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    recap = {}
    for key, value in re.findall(r"(\w+)=(\d+)", proc.stdout.split("PLAY RECAP")[-1]):
        recap[key] = recap.get(key, 0) + int(value)     # every host of the play
    return proc, wall, recap


def main():
    env = lab_env()
    deployed = 0
    for namespace in ("kai-scheduler", "gpu-fractioning"):
        out = subprocess.run([str(REPO / "lab" / "bin" / "helm"), "list", "-n", namespace, "-o", "json"], env=env,
                             capture_output=True, text=True, check=False).stdout
        deployed += out.count('"deployed"')
    if deployed < 2:
        proc, wall = play(env, "site.yml", [])[:2]
        if proc.returncode != 0:
            print(proc.stdout[-4000:])
            return 1
        print(f"site.yml converge first: {wall:.0f} s")
    print(f"{'play (converged lab)':<26}{'wall s':>8}{'ok (all hosts)':>16}{'changed':>9}")
    for label, playbook, extra in RUNS:
        proc, wall, recap = play(env, playbook, extra)
        if proc.returncode != 0:
            print(proc.stdout[-4000:])
            return 1
        print(f"{label:<26}{wall:>8.1f}{recap.get('ok', 0):>16}{recap.get('changed', 0):>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
