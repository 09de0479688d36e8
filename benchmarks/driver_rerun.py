# Apache-2.0
"""Cost of re-running the nvidia_driver role on a converged node.

Converges the nvidia_driver_fresh Molecule scenario's container, then times,
interleaved, ROUNDS no-op runs of the role (its converge playbook) and ROUNDS
`ansible -m setup` on the same container, and prints the medians and their
ratio (aim: at most 3x). Prints figures only; it never passes or fails on time.

    source scripts/env.sh && python3 benchmarks/driver_rerun.py [--rounds 5] [--keep]

The podman connection cannot pipeline; over ssh, ansible.cfg enables it.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCENARIO = "nvidia_driver_fresh"
HOST = "smshare-nvd-fresh-%s" % os.environ.get("SMSHARE_LAB_INSTANCE", "0")


def sh(argv, env, quiet=True):
    proc = subprocess.run(argv, cwd=REPO, env=env, text=True, check=False,
                          stdout=subprocess.PIPE if quiet else None, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(argv), (proc.stdout or "")[-4000:]))
    return proc.stdout or ""


def timed(argv, env):
    start = time.monotonic()
    out = sh(argv, env)
    return time.monotonic() - start, out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="leave the container up")
    args = parser.parse_args()

    env = dict(os.environ, ANSIBLE_FORCE_COLOR="false", NO_COLOR="1",
               ANSIBLE_ROLES_PATH=str(REPO / "roles"))
    env["PATH"] = "%s:%s" % (REPO / ".venv" / "bin", env.get("PATH", ""))
    env.setdefault("CONTAINERS_CONF", str(REPO / "molecule" / "containers.conf"))
    sh([str(REPO / "lab" / "node-image.sh")], env)
    repo_sh = str(REPO / "lab" / "standin" / "apt" / "repo.sh")
    url = sh([repo_sh, "hold", str(os.getpid())], env).strip().splitlines()[-1]
    env["SMSHARE_APT_URL"] = url
    for step in ("create", "prepare", "converge"):
        sh(["molecule", step, "-s", SCENARIO], env)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            inventory = Path(tmp) / "hosts.yml"
            inventory.write_text(
                "all:\n  hosts:\n    %s:\n      ansible_connection: containers.podman.podman\n"
                "  vars:\n    nvidia_driver_repo_mirror_url: %s\n    nvidia_driver_fabricmanager: always\n"
                % (HOST, url))
            role_run = ["ansible-playbook", "-i", str(inventory),
                        str(REPO / "molecule" / SCENARIO / "converge.yml")]
            setup_run = ["ansible", "-i", str(inventory), HOST, "-m", "ansible.builtin.setup"]
            first = timed(role_run, env)[1]  # warm-up, and proof the node is converged
            if "changed=0" not in first:
                sys.exit("the node is not converged; the role run changed something:\n" + first[-3000:])
            role_times, setup_times = [], []
            for _round in range(args.rounds):
                seconds, out = timed(role_run, env)
                if "changed=0" not in out:
                    sys.exit("a re-run changed something:\n" + out[-3000:])
                role_times.append(seconds)
                setup_times.append(timed(setup_run, env)[0])
    finally:
        if not args.keep:
            sh(["molecule", "destroy", "-s", SCENARIO], env)
        sh([repo_sh, "release", str(os.getpid())], env)
    role, setup = statistics.median(role_times), statistics.median(setup_times)
    print("no-op nvidia_driver run : median %.2f s  (%s)" % (role, ", ".join("%.2f" % t for t in role_times)))
    print("ansible -m setup        : median %.2f s  (%s)" % (setup, ", ".join("%.2f" % t for t in setup_times)))
    print("ratio role/setup        : %.2fx  (aim: <= 3x)" % (role / setup))
    return 0


if __name__ == "__main__":
    sys.exit(main())
