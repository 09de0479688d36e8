"""One site.yml converge for the whole directory (session scope, shared by the
cluster checks, the smoke test and the air-gap proof); test_uninstall_on_lab.py
runs last here and takes KAI off. The tests hold in any order: one that needs
KAI after an uninstall test (-k, another order) gets the converge again
(`converged`). Whatever still has KAI at the end of the session is uninstalled
then, so later tests (the pilot refuses a cluster with KAI) find a clean lab.

The converge is an air-gapped site's (airgap_site.py): a user's copy of
inventories/airgap with the lab overlay (lab/README.md), whose mirror URLs are
the lab's mirrors, the whole run under strace. test_cluster_on_lab.py runs the
README's two commands again through a copy of inventories/a100 (nothing to
change: both shipped inventories converge the lab alike); the later tests use
the lab's inventory, which the overlay matches on everything the roles leave
in the cluster (the record of the smoke test's pass included)."""
import json
import sys
import time

import pytest

from airgap_site import AirgapSite
from cluster_helpers import assert_hosts, releases, take_kai_off


class Install:
    def __init__(self, proc, airgap):
        self.proc = proc
        self.airgap = airgap
        self.installed = True
        self.failed = None

    def ensure(self, lab):
        """KAI installed, converged again when a test took it off before (the
        uninstall tests: last in file order, not under -k or another order).
        A converge again that failed is not tried by every later test."""
        if self.failed:
            pytest.fail(f"converging the lab again after an uninstall test failed earlier: {self.failed}")
        if not self.installed:
            try:
                self.proc = converge(lab, self.airgap)
            except BaseException as exc:
                self.failed = " ".join(str(exc).split())[:300] or type(exc).__name__
                raise
            self.installed = True
        return self.proc


def converge(lab, airgap):
    """The air-gapped converge from a cluster without KAI; its output."""
    # A lab kept from an earlier session (SMSHARE_LAB_KEEP), or a converge again after a test
    # took KAI off: the node caches the earlier build of the forks, which the converge's own
    # build pushes again under the same tags, and the release check rightly names every pod
    # that runs one. Start from a cluster without KAI and a node without those images (a fresh
    # lab has neither).
    if releases(lab):
        take_kai_off(lab)
    manifest = lab.state_dir / "fork_images_manifest.json"
    if manifest.is_file():
        sys.path.insert(0, str(lab.root / "lab"))
        from smshare_lab import node_tier   # pylint: disable=import-outside-toplevel
        node_tier.forget_images(*[item["image"] + ":" for item in json.loads(manifest.read_text())["images"]])
    started = time.monotonic()
    proc = airgap.converge()
    print(f"\n[cluster] site.yml converge (air-gapped, under strace), smoke play included: "
          f"{time.monotonic() - started:.0f} s")
    try:
        assert_hosts(lab, proc, failed=0)
    except AssertionError:
        take_kai_off(lab)   # a failed converge must not fail the later tests too
        raise
    return proc


@pytest.fixture(scope="session")
def kai_install(lab, tmp_path_factory):
    if not lab.gpu_nodes or not lab.node_tier:
        pytest.fail("the lab has no GPU nodes or no node tier (see labctl up's output)")
    airgap = AirgapSite(lab, tmp_path_factory.mktemp("site"))
    install = Install(converge(lab, airgap), airgap)
    yield install
    if install.installed:
        take_kai_off(lab)


@pytest.fixture
def converged(lab, kai_install):
    """site.yml's output on the lab, with KAI installed whatever ran before."""
    return kai_install.ensure(lab)
