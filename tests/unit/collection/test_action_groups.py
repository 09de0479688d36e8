# Apache-2.0
"""meta/runtime.yml's action groups exist for module_defaults: every module of a
group takes the options the group shares (one `group/smshare.kai.<name>` entry
sets them for all, and an option one module lacks would fail it as an
unsupported parameter), and a group has at least two modules."""
import json
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
GROUPS = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())["action_groups"]
# What each group is for: the options a module_defaults entry for it sets.
SHARED = {"mps": {"pipe_directory", "log_directory"}, "cluster": {"kubeconfig", "context"}}


@pytest.fixture(scope="module")
def options():
    modules = sorted({m for members in GROUPS.values() for m in members})
    proc = subprocess.run(["ansible-doc", "-j"] + ["smshare.kai." + m for m in modules], cwd=REPO,
                          text=True, capture_output=True, check=True)
    return {name.split(".")[-1]: set(doc["doc"].get("options") or {}) for name, doc in json.loads(proc.stdout).items()}


def test_every_group_says_what_it_shares():
    assert set(GROUPS) == set(SHARED)


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_a_group_is_modules_that_take_its_options(group, options):
    members = GROUPS[group]
    assert len(members) >= 2, "%s: a group of one module sets nothing module_defaults could not" % group
    for module in members:
        assert SHARED[group] <= options[module], "%s lacks %s" % (module, SHARED[group] - options[module])


def test_no_other_module_takes_all_of_a_groups_options(options):
    every = {p.stem for p in (REPO / "plugins" / "modules").glob("*.py")}
    proc = subprocess.run(["ansible-doc", "-j"] + ["smshare.kai." + m for m in sorted(every - set(options))],
                          cwd=REPO, text=True, capture_output=True, check=True)
    for name, doc in json.loads(proc.stdout).items():
        taken = set(doc["doc"].get("options") or {})
        for group, shared in SHARED.items():
            assert not shared <= taken, "%s takes %s's options but is not in it" % (name, group)
