# Apache-2.0
"""gpu_info / mps_info / mps_control in a podman GPU-node container
(molecule/gpu_modules): check mode, bad input, converge, idempotence, verify."""
import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
ANSI = re.compile(r"\x1b\[[0-9;]*m")

pytestmark = [pytest.mark.molecule, pytest.mark.slow]


def test_gpu_modules_scenario():
    image = subprocess.run([str(REPO / "lab" / "node-image.sh")], cwd=REPO, text=True,
                           capture_output=True, timeout=900, check=False)
    assert image.returncode == 0, image.stderr[-4000:]
    proc = subprocess.run(["molecule", "test", "-s", "gpu_modules"], cwd=REPO, env=dict(os.environ),
                          text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=1200,
                          check=False)
    out = ANSI.sub("", proc.stdout)
    assert proc.returncode == 0, out[-12000:]
    for phase, result in (("side_effect", "2 successful"), ("converge", "Successful"),
                          ("idempotence", "Successful"), ("verify", "Successful")):
        assert re.search(r"gpu_modules \S+ %s: Executed: %s" % (phase, result), out), phase
    assert out.count("TASK [It failed for the right reason") == 4
    assert re.search(r"=+ 6 passed", out), "testinfra did not run all six checks"
