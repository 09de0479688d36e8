# Apache-2.0
"""Cross-file rules the collection keeps: each role's argument spec matches its
defaults, both inventories have the same groups, and site.yml parses with the
production inventory."""
import os
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "defaults" / "main.yml").is_file())


def load(path):
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle) or {}


@pytest.mark.parametrize("role", ROLES)
def test_argument_spec_matches_defaults(role):
    defaults_file = REPO / "roles" / role / "defaults" / "main.yml"
    defaults = load(defaults_file)
    options = load(REPO / "roles" / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
    # Optional variables are unset by default: in the spec without a default,
    # absent from defaults/main.yml except as a commented example.
    optional = sorted(name for name, spec in options.items() if "default" not in spec and not spec.get("required"))
    assert sorted(defaults) == sorted(set(options) - set(optional)), \
        "defaults and argument_specs list different variables"
    text = defaults_file.read_text()
    for name in optional:
        assert "# %s:" % name in text, "%s: optional, but defaults/main.yml does not show it commented" % name
    for name, value in defaults.items():
        assert name.startswith(role + "_"), "%s is not prefixed with the role name" % name
    for name, value in defaults.items():
        if "default" in options[name]:
            assert options[name]["default"] == value, "%s: spec default %r, defaults/main.yml %r" % (
                name, options[name]["default"], value)


def groups(inventory):
    found = set()

    def walk(node):
        for name, child in ((node or {}).get("children") or {}).items():
            found.add(name)
            walk(child)
    walk(load(REPO / "inventories" / inventory / "hosts.yml")["all"])
    return found


def test_inventories_share_the_production_groups():
    production = groups("a100")
    assert {"gpu_nodes", "build_hosts", "k8s_controller"} <= production
    assert production <= groups("lab")


def test_group_vars_files_exist_in_both_inventories():
    def names(inventory):
        return {p.name for p in (REPO / "inventories" / inventory / "group_vars").glob("*.yml")}
    assert names("a100") == names("lab")


def test_site_parses_with_the_production_inventory():
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    env.pop("ANSIBLE_VAULT_PASSWORD_FILE", None)
    proc = subprocess.run(["ansible-playbook", "site.yml", "-i", "inventories/a100", "--syntax-check"],
                          cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
