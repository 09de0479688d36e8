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
    """An HGX node behind an https mirror with a login: check mode and every bad
    input change nothing byte for byte; the first converge at -vvv leaks no form
    of the password; 615, Fabric Manager and NSCQ (other Debian revision, same
    upstream version), nouveau, headers and persistenced converge; a second run
    changes nothing; without the mirror NVIDIA's own entry comes back."""
    out = molecule_test("nvidia_driver_fresh", molecule_env)
    done = phases(out, "nvidia_driver_fresh")
    assert done["side_effect"] == ["3 successful", "Successful"], done
    for phase in ("converge", "idempotence", "verify"):
        assert done[phase] == ["Successful"], done
    assert re.search(r"=+ 8 passed", out), "testinfra did not run all eight checks"
    # The check-mode run, every bad-input case and the secret search ran their assertions.
    for task in ("Check mode reported changes and no failure", "Each was refused for the right reason",
                 "Its output holds no form of the password", "Only apt's auth file holds it",
                 "It would point apt back at NVIDIA's repository and drop the login"):
        assert "TASK [%s]" % task in out, task
    assert out.count("The node is byte-for-byte what it was") == 2


def test_other_pin_negative_pin_and_reboot(molecule_env):
    """A PCIe 580 node behind a negative NVIDIA pin: refused naming file and
    line, byte for byte unchanged; fixed (cuda-keyring from the controller's
    .deb) and upgraded to 615 with a reboot reported as needed; after the
    container restarts 615 is loaded with nouveau blacklisted, no Fabric
    Manager or NSCQ without NVSwitches, and a re-run changes nothing."""
    out = molecule_test("nvidia_driver_upgrade", molecule_env)
    done = phases(out, "nvidia_driver_upgrade")
    assert done["side_effect"] == ["2 successful"], done
    for phase in ("converge", "idempotence", "verify"):
        assert done[phase] == ["Successful"], done
    assert "/etc/apt/preferences.d/freeze-nvidia.pref line 7" in out
    assert "Driver/library version mismatch" in out
    assert "TASK [Nothing changed]" in out
    assert re.search(r"=+ 6 passed", out), "testinfra did not run all six checks"
