# Apache-2.0
"""Fixtures for the nvidia_driver Molecule scenarios.

driver_lab: the node image (lab/node-image.sh, cached), the stand-in HGX PCI
tree (lab/standin/pci/make-tree.py) and the stand-in NVIDIA apt repository
served on the podman bridge (lab/standin/apt/repo.sh), held
for this session and released afterwards (the server stops when no other
live session holds it).
"""
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
REPO_SH = REPO / "lab" / "standin" / "apt" / "repo.sh"


def run(argv, **kwargs):
    return subprocess.run([str(a) for a in argv], cwd=REPO, text=True, check=True,
                          stdout=subprocess.PIPE, **kwargs).stdout.strip()


@pytest.fixture(scope="session")
def driver_lab():
    image = run([REPO / "lab" / "node-image.sh"])
    run([REPO / "lab" / "standin" / "pci" / "make-tree.py", "hgx-a100-8gpu"])
    url = run([REPO_SH, "hold", os.getpid()])
    yield {"image": image, "url": url, "private_url": run([REPO_SH, "private-url"])}
    run([REPO_SH, "release", os.getpid()])


@pytest.fixture()
def molecule_env(driver_lab):
    env = dict(os.environ)
    env["SMSHARE_APT_URL"] = driver_lab["url"]
    env["SMSHARE_APT_PRIVATE_URL"] = driver_lab["private_url"]
    env["PATH"] = "%s:%s" % (REPO / ".venv" / "bin", env.get("PATH", ""))
    env.setdefault("CONTAINERS_CONF", str(REPO / "molecule" / "containers.conf"))
    env["ANSIBLE_FORCE_COLOR"] = "false"
    env["NO_COLOR"] = "1"
    return env
