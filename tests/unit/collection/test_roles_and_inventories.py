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
    """Every default is specified with the same value; a specified option without a
    default is either required or optional-and-absent (reaches modules as default(omit))."""
    defaults = load(REPO / "roles" / role / "defaults" / "main.yml")
    options = load(REPO / "roles" / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert sorted(defaults) == sorted(n for n, o in options.items() if "default" in o), \
        "defaults/main.yml and the argument spec's defaults list different variables"
    for name, option in options.items():
        assert name.startswith(role + "_"), "%s is not prefixed with the role name" % name
        assert not (option.get("required") and "default" in option), "%s: required with a default" % name
    for name, value in defaults.items():
        assert options[name]["default"] == value, "%s: spec default %r, defaults/main.yml %r" % (
            name, options[name]["default"], value)


@pytest.mark.parametrize("role", ROLES)
def test_absent_options_are_named_in_the_defaults_comments(role):
    """A newcomer reading defaults/main.yml sees every variable, set or not."""
    text = (REPO / "roles" / role / "defaults" / "main.yml").read_text(encoding="utf-8")
    options = load(REPO / "roles" / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
    for name, option in options.items():
        if "default" not in option:
            assert name in text, "%s (no default) is not mentioned in defaults/main.yml" % name


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
