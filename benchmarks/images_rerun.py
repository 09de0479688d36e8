# Apache-2.0
"""Wall time of playbooks/images.yml: first run (builds and pushes all 19
stand-in images) against the second run (everything present: builds nothing).

Own registry (lab/registry.sh, temp state, free port) and stand-in forks;
prints figures, never passes or fails on time.

    source scripts/env.sh && python benchmarks/images_rerun.py [--kai-platforms linux/amd64,linux/arm64]

KAI-Scheduler's platforms default to the role's (what the guide builds: amd64
and arm64); the stand-in docker CLI stands in for the build host's engine.
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))                          # registry_state
sys.path.insert(0, str(REPO / "tests" / "integration" / "images"))
from conftest import ForkImages, Registry, base_env  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kai-platforms", default="linux/amd64,linux/arm64")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="images-rerun-") as tmp:
        tmp = Path(tmp)
        state = tmp / "registry"
        env = dict(base_env(), SMSHARE_REGISTRY_PORT="0")
        subprocess.run(["bash", str(REPO / "lab/registry.sh"), "up", str(state)], env=env, check=True,
                       capture_output=True)
        try:
            subprocess.run(["bash", str(REPO / "lab/standin/forks/make-forks.sh"), str(tmp / "forks")],
                           check=True, capture_output=True)
            forks = json.loads((tmp / "forks" / "forks.json").read_text())
            registry = Registry(address=(state / "address").read_text().strip(), ca=str(state / "ca.crt"),
                                cert_dir=str(state), username=(state / "username").read_text().strip(),
                                password=(state / "password").read_text().strip())
            (tmp / "host").mkdir()
            run = ForkImages(tmp / "host", registry, forks)
            platforms = args.kai_platforms.split(",")
            rows = []
            for label in ("first run", "second run"):
                outcome = run.play(fork_images_kai_scheduler_platforms=platforms)
                if outcome.rc != 0:
                    print(outcome.output[-4000:])
                    return 1
                rows.append((label, outcome.wall_s, outcome.recap["changed"], len(run.records())))
        finally:
            subprocess.run(["bash", str(REPO / "lab/registry.sh"), "down", str(state)], env=env,
                           capture_output=True, check=False)
    print(f"playbooks/images.yml, 19 stand-in images, KAI-Scheduler platforms {args.kai_platforms}")
    print(f"{'run':<12}{'wall s':>8}{'changed':>9}{'make runs so far':>18}")
    for label, wall, changed, makes in rows:
        print(f"{label:<12}{wall:>8.1f}{changed:>9}{makes:>18}")
    print(f"second/first: {rows[1][1] / rows[0][1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
