"""The converge of an air-gapped site, on the lab: the directory's one converge
(conftest.py) is run through a user's copy of inventories/airgap and the lab
overlay, every download location pointing at a mirror the lab serves, under
strace (airgap_site.py says how and why). These tests read what it left: every destination the trace
recorded is the lab's, the nodes' keyring came from the local .deb and apt
from the stand-in CUDA repository, and the image build pulled its base images
from the mirror, never by their public names.

On a fresh lab (the test command's) that converge does everything from bare:
clones, keyring, apt, image builds and pushes, charts, helm, the smoke test's
images. On a lab kept from an earlier session it still builds the images
(`fork_images_force_rebuild`) and installs the keyring again (purged first),
so those are always in the trace; the fork clones and chart copies are then
the earlier session's.
"""
import subprocess

import pytest

from airgap_site import destinations, lab_nets, outside
from lab_helpers import describe, recap

pytestmark = [pytest.mark.lab, pytest.mark.lab_nodes, pytest.mark.slow]


@pytest.fixture
def airgap(kai_install):
    return kai_install.airgap


def test_the_converge_reaches_nothing_outside_the_mirrors(lab, kai_install, airgap):
    proc = kai_install.proc
    for node in lab.gpu_nodes:
        assert recap(proc.stdout, node)["failed"] == 0
        assert "cuda-keyring" in subprocess.run(["podman", "exec", node, "dpkg-query", "-W", "cuda-keyring"],
                                                capture_output=True, text=True, check=False).stdout
    assert (lab.state_dir / "kai-forks" / "KAI-Scheduler" / ".git").is_dir()
    found = destinations(airgap.trace)
    counts = {}
    for address, port in found:
        counts[f"{address}:{port}"] = counts.get(f"{address}:{port}", 0) + 1
    print("[airgap] site.yml destinations: " + ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())))
    assert found, "the trace recorded no connection at all: strace did not follow the run"
    assert outside(found, airgap.nets) == [], describe(proc)
    # The stand-in CUDA repository (the mirror) was used by apt on the nodes.
    apt_port = int(lab.standin_apt_url.rsplit(":", 1)[1].split("/")[0])
    assert any(port == apt_port for _address, port in found), counts
    # And the images went to (and came from) the lab registry.
    registry_port = int(lab.registry.address.rsplit(":", 1)[1])
    assert any(port == registry_port for _address, port in found), counts


def test_the_images_build_pulls_its_base_images_from_the_mirror(lab, airgap):
    pulls = [line for line in airgap.calls.splitlines() if line.startswith("pull ")]
    assert pulls, "the converge pulled no base image: it built nothing\n" + airgap.calls[-2000:]
    for item in airgap.base_images:
        assert f"pull {item['mirror']}" in airgap.calls, airgap.calls
        assert f"tag {item['mirror']} {item['name']}" in airgap.calls, airgap.calls
    assert [line for line in pulls if "/mirror/" not in line] == [], pulls
    # Again: every name already holds its mirror's image, so nothing is pulled anew or tagged.
    proc = lab.playbook("tests/integration/cluster/playbooks/airgap_base_images.yml", inventory=airgap.inventory)
    assert proc.returncode == 0, describe(proc)
    assert recap(proc.stdout)["changed"] == 0, describe(proc)


def test_the_trace_check_can_fail(lab, tmp_path):
    """An attempt to reach an outside address (TEST-NET-1, from inside a GPU node) is named: strace
    follows podman exec into the node, and the check does fail."""
    trace = tmp_path / "probe.trace"
    probe = "import socket\ntry:\n socket.create_connection(('192.0.2.1', 443), timeout=1)\nexcept OSError:\n pass\n"
    subprocess.run(["strace", "-f", "-qq", "-e", "trace=connect,sendto,sendmsg", "-o", str(trace),
                    "podman", "exec", lab.gpu_nodes[0], "python3", "-c", probe],
                   capture_output=True, text=True, check=False)
    assert outside(destinations(trace.read_text()), lab_nets(lab)) == [("192.0.2.1", 443)], trace.read_text()
