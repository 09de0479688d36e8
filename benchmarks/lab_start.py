#!/usr/bin/env python3
"""Print how long the lab takes to start (figures only, never pass/fail).

  benchmarks/lab_start.py [--nodes] [--cold-build]

  cold start   `labctl down --purge` then `labctl up`: new PKI, etcd, containers
               (Kubernetes binaries from the cache)
  warm start   `labctl down` then `labctl up` (PKI and cache kept)
  no-op up     `labctl up` on a running lab
  cold build   (--cold-build) `labctl build` into an empty temporary cache: the
               full Kubernetes build from Debian's source package; the real
               cache in /var/cache/smshare-lab is left alone

The lab is left as it was found: up (with the same node tier switch) if it was up.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LABCTL = [sys.executable, str(ROOT / "lab" / "labctl")]


def timed(*args, env=None):
    start = time.monotonic()
    proc = subprocess.run(LABCTL + list(args), text=True, capture_output=True, env=env, check=False)
    took = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"labctl {' '.join(args)} failed (rc={proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return took


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", action="store_true", help="include the node tier")
    parser.add_argument("--cold-build", action="store_true", help="also time a build from nothing (minutes)")
    args = parser.parse_args()
    up = ["up"] + (["--nodes"] if args.nodes else [])
    was_up = subprocess.run(LABCTL + ["status"], capture_output=True, check=False).returncode == 0
    figures = {}
    if args.cold_build:
        scratch = Path(tempfile.mkdtemp(prefix="smshare-lab-coldbuild-", dir="/var/tmp"))
        try:
            env = dict(os.environ, SMSHARE_LAB_CACHE=str(scratch))
            targets = ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"]
            figures["cold build (control plane)"] = timed("build", *targets, env=env)
            if args.nodes:
                figures["cold build (+ kubelet, pause)"] = timed("build", "kubelet", "pause", env=env)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    timed("up", *up[1:])                       # make sure the cache is complete
    timed("down", "--purge")
    figures["cold start (fresh state)"] = timed(*up)
    figures["no-op up (already running)"] = timed(*up)
    timed("down")
    figures["warm start"] = timed(*up)
    figures["down"] = timed("down")
    if was_up:
        timed(*up)
    print(f"lab start times ({'with' if args.nodes else 'without'} node tier, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}):")
    for name, secs in figures.items():
        print(f"  {name:<32} {secs:7.1f} s")
    print(json.dumps({k: round(v, 1) for k, v in figures.items()}))


if __name__ == "__main__":
    main()
