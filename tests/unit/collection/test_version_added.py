# Apache-2.0
"""Until the first release, everything the collection documents is new in it: every
version_added in the plugins' documentation (options included) and every role's entry
point says galaxy.yml's version, so the first changelog lists them all as new."""
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
GALAXY = yaml.safe_load((REPO / "galaxy.yml").read_text())
RELEASED = (yaml.safe_load((REPO / "changelogs" / "changelog.yaml").read_text()) or {}).get("releases") or {}
PLUGIN_FILES = sorted(p for p in (REPO / "plugins").rglob("*") if p.suffix in (".py", ".yml") and p.is_file()
                      and "module_utils" not in p.parts)
VERSION_ADDED = re.compile(r"^\s*version_added:\s*['\"]?([^'\"\s]+)", re.M)


def test_nothing_has_been_released_yet():
    # Once a release exists, new entries take the next version: this test goes with it.
    assert RELEASED == {}


@pytest.mark.parametrize("path", PLUGIN_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_plugin_entry_is_new_in_the_first_release(path):
    assert set(VERSION_ADDED.findall(path.read_text())) <= {GALAXY["version"]}


@pytest.mark.parametrize("spec", sorted((REPO / "roles").glob("*/meta/argument_specs.yml")),
                         ids=lambda p: p.parts[-3])
def test_every_role_entry_point_says_when_it_was_added(spec):
    for name, entry in yaml.safe_load(spec.read_text())["argument_specs"].items():
        assert str(entry.get("version_added")) == GALAXY["version"], name


def test_every_module_and_plugin_doc_says_it():
    docs = [p for p in PLUGIN_FILES if p.parent.name in ("modules",) or p.suffix == ".yml"]
    missing = [str(p.relative_to(REPO)) for p in docs if not VERSION_ADDED.search(p.read_text())]
    assert missing == []
