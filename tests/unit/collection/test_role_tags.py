# Apache-2.0
"""Names a newcomer can guess: every tag in a role is `<role>_<step>` (or always/never),
and every role checks its inputs in tasks/validate.yml (issue 21)."""
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir())
# Internal roles take no inputs of their own (cluster_common's callers check theirs).
INTERNAL = ("cluster_common", "plugin_preload")


def tags_in(node):
    """Every tag a task file names, nested blocks included."""
    if isinstance(node, list):
        for item in node:
            yield from tags_in(item)
    elif isinstance(node, dict):
        tags = node.get("tags")
        if isinstance(tags, str):
            yield tags
        elif isinstance(tags, list):
            yield from tags
        for key in ("block", "rescue", "always"):
            yield from tags_in(node.get(key))


@pytest.mark.parametrize("role", ROLES)
def test_every_tag_of_a_role_is_role_step(role):
    wrong = set()
    for path in sorted((REPO / "roles" / role / "tasks").glob("*.yml")):
        for tag in tags_in(yaml.safe_load(path.read_text())):
            if tag not in ("always", "never") and tag != role and not tag.startswith(role + "_"):
                wrong.add("%s: %s" % (path.name, tag))
    assert not wrong, sorted(wrong)


@pytest.mark.parametrize("role", [r for r in ROLES if r not in INTERNAL])
def test_input_checks_are_validate_yml(role):
    tasks = REPO / "roles" / role / "tasks"
    assert (tasks / "validate.yml").is_file(), "%s checks its inputs in tasks/validate.yml" % role
    assert not (tasks / "preflight.yml").exists(), "one word for input checks: validate.yml"
