# Apache-2.0
"""The nvidia_driver role in real podman containers (Molecule scenarios).

Each scenario is one `molecule test`; its phases hold the cases and their
checks (see molecule/nvidia_driver_*/molecule.yml). Here: the run passes and
every phase the case needs actually ran and passed.
"""
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.molecule, pytest.mark.slow]

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def molecule_test(scenario, env):
    proc = subprocess.run(["molecule", "test", "-s", scenario], cwd=REPO, env=env, text=True, check=False,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=1200)
    out = ANSI.sub("", proc.stdout)
    assert proc.returncode == 0, out[-12000:]
    return out


def phases(out, scenario):
    """Phase -> result text from Molecule's closing details."""
    found = {}
    for line in out.splitlines():
        match = re.match(r"^%s \S+ (\w+): Executed: (.*)$" % re.escape(scenario), line.strip())
        if match:
            found.setdefault(match.group(1), []).append(match.group(2))
    return found


def test_fresh_host(molecule_env):
    """Check mode changes nothing, bad input is refused, 615 + Fabric Manager
    converge, a second run changes nothing, the state verifies."""
    out = molecule_test("nvidia_driver_fresh", molecule_env)
    done = phases(out, "nvidia_driver_fresh")
    assert done["side_effect"] == ["2 successful"], done
    for phase in ("converge", "idempotence", "verify"):
        assert done[phase] == ["Successful"], done
    assert re.search(r"=+ 5 passed", out), "testinfra did not run all five checks"
    # The check-mode run and the bad-input cases ran their assertions.
    for task in ("Check mode reported changes and no failure", "No package, no repository",
                 "A mirror URL that is not a URL", "Nothing was installed"):
        assert "TASK [%s]" % task in out, task


def test_other_pin_negative_pin_and_reboot(molecule_env):
    """580 host behind a negative NVIDIA pin: refused naming file and line;
    fixed (cuda-keyring from the controller's .deb) and upgraded to 615 with a
    reboot reported as needed; after the
    container restarts 615 is loaded, Fabric Manager runs, re-run changes nothing."""
    out = molecule_test("nvidia_driver_upgrade", molecule_env)
    done = phases(out, "nvidia_driver_upgrade")
    assert done["side_effect"] == ["2 successful"], done
    for phase in ("converge", "idempotence", "verify"):
        assert done[phase] == ["Successful"], done
    assert "/etc/apt/preferences.d/freeze-nvidia.pref line 7" in out
    assert "Driver/library version mismatch" in out
    assert re.search(r"=+ 6 passed", out), "testinfra did not run all six checks"
