"""The main job: site.yml on the lab converges every host; a second run and a
--check --diff run on the converged lab find nothing to do."""
import pytest

from lab_helpers import describe, recap

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def assert_every_host(lab, proc, **expected):
    assert proc.returncode == 0, describe(proc)
    for host in [*lab.gpu_nodes, "localhost"]:
        counts = recap(proc.stdout, host)
        for key, value in expected.items():
            assert counts[key] == value, f"{host}: {key}={counts[key]}\n{describe(proc)}"


def test_site_converges_then_changes_nothing(lab):
    if not lab.gpu_nodes:
        pytest.fail("the lab started no GPU nodes (see labctl up's output)")
    assert_every_host(lab, lab.playbook("site.yml"), failed=0)
    assert_every_host(lab, lab.playbook("site.yml"), failed=0, changed=0)
    assert_every_host(lab, lab.playbook("site.yml", "--check", "--diff"), failed=0, changed=0)
