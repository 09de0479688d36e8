# Apache-2.0
"""The build_hosts wiring: shared smshare_* knobs reach the role, and only the
lab turns the builder check off, by an explicit variable."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO, base_env


def host_vars(inventory, host):
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-inventory"),
                           "-i", str(REPO / "inventories" / inventory), "--host", host],
                          env=base_env(), text=True, capture_output=True, check=True)
    return json.loads(proc.stdout)


@pytest.mark.parametrize("inventory, host", [("a100", "build-01"), ("lab", "localhost")])
def test_every_pin_comes_from_the_shared_knobs(inventory, host):
    found = host_vars(inventory, host)
    for fork in ("kai_scheduler", "gpu_fractioning"):
        for what in ("repo_url", "pr_ref", "commit"):
            assert found[f"fork_images_{fork}_{what}"] == "{{ smshare_%s_%s }}" % (fork, what)
    assert found["fork_images_registry"] == "{{ smshare_registry }}"
    assert found["fork_images_platforms"] == "{{ smshare_image_platforms }}"


def test_only_the_lab_turns_the_builder_check_off():
    lab = yaml.safe_load((REPO / "inventories/lab/group_vars/build_hosts.yml").read_text())
    assert lab["fork_images_check_builder"] is False
    a100 = host_vars("a100", "build-01")
    assert "fork_images_check_builder" not in a100
    defaults = yaml.safe_load((REPO / "roles/fork_images/defaults/main.yml").read_text())
    assert defaults["fork_images_check_builder"] is True
