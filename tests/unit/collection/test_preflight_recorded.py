# Apache-2.0
"""The preflight role's table and verdict, and the nvidia_driver role's version
choice, as ansible-playbook makes them from the recorded cases
(tests/unit/plugins/module_utils/fixtures/preflight_rows), equal the recording
of the roles' Jinja (README.md there)."""
import importlib.util
import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests/unit/plugins/module_utils/fixtures/preflight_rows"
RECORDED = json.loads((FIXTURES / "recorded.json").read_text())


def recorder():
    spec = importlib.util.spec_from_file_location("preflight_rows_record", FIXTURES / "record.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parts_in_any_order(table):
    """The table's first line lists the parts in set order: compare them as a set."""
    if not table:
        return table
    head, _sep, rest = table.partition("\n")
    head = re.sub(r"\((.*)\)\Z", lambda m: "(%s)" % ", ".join(sorted(m.group(1).split(", "))), head)
    return head + _sep + rest


def comparable(found):
    for entry in found["preflight"].values():
        if "table" in entry:
            entry["table"] = parts_in_any_order(entry["table"])
    return found


def test_the_jinja_makes_what_was_recorded():
    assert comparable(recorder().run("jinja")) == comparable(json.loads(json.dumps(RECORDED)))
