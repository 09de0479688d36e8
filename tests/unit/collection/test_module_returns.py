# Apache-2.0
"""Return keys Ansible takes for itself: a module documenting one would hand its
caller something else (a mapping returned as `results` reaches the play renamed
to ansible_module_results, with a warning; `_ansible_*` keys are dropped)."""
from pathlib import Path

import pytest
import yaml

MODULES = sorted((Path(__file__).resolve().parents[3] / "plugins" / "modules").glob("*.py"))


def returned(path):
    source = path.read_text()
    start = source.index("RETURN = r") + len("RETURN = r")
    quote = source[start:start + 3]
    return yaml.safe_load(source[start + 3:source.index(quote, start + 3)]) or {}


@pytest.mark.parametrize("path", MODULES, ids=lambda path: path.stem)
def test_no_module_returns_a_key_ansible_keeps_for_itself(path):
    keys = returned(path)
    assert not [key for key in keys if key.startswith("_ansible_")], keys
    if "results" in keys:
        assert keys["results"].get("type") == "list", "%s: a 'results' mapping reaches the play renamed" % path.name
