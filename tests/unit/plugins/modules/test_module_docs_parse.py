# Apache-2.0
"""Every module's DOCUMENTATION, EXAMPLES and RETURN are YAML that loads: a stray
': ' at a line's end turns prose into a mapping and ansible-doc, lint and
sanity fail far from the edit (sanity runs later in the test command)."""
import ast
from pathlib import Path

import pytest
import yaml

MODULES = sorted((Path(__file__).resolve().parents[4] / "plugins" / "modules").glob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=[p.stem for p in MODULES])
def test_docs_load(path):
    found = {}
    for node in ast.parse(path.read_text()).body:
        name = getattr(node.targets[0], "id", None) if isinstance(node, ast.Assign) else None
        if name in ("DOCUMENTATION", "EXAMPLES", "RETURN"):
            found[node.targets[0].id] = yaml.safe_load(node.value.value)
    assert set(found) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}, path
    assert isinstance(found["DOCUMENTATION"], dict) and found["DOCUMENTATION"]["module"] == path.stem
