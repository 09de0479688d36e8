# Apache-2.0
"""The preflight role's table and verdict, and the nvidia_driver role's version
choice, as ansible-playbook makes them from the roles' vars/main.yml and
report.yml on the recorded cases (tests/unit/plugins/module_utils/fixtures/preflight_rows),
equal the recording of the roles' Jinja before the rules moved to Python
(README.md there)."""
import importlib.util
import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests/unit/plugins/module_utils/fixtures/preflight_rows"
RECORDED = json.loads((FIXTURES / "recorded.json").read_text())
# The Jinja stopped this host with a template error; the role now shows its table
# (tests/unit/plugins/filter/test_preflight_rows_recorded.py holds its rows).
CRASHED = "runtime-nothing-there"


def recorder():
    spec = importlib.util.spec_from_file_location("preflight_rows_record", FIXTURES / "record.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parts_in_any_order(table):
    """The Jinja's first line listed the parts in set order: compare them as a set."""
    if not table:
        return table
    head, sep, rest = table.partition("\n")
    head = re.sub(r"\((.*)\)\Z", lambda m: "(%s)" % ", ".join(sorted(m.group(1).split(", "))), head)
    return head + sep + rest


@pytest.fixture(scope="module")
def found():
    return recorder().run("role")


@pytest.mark.parametrize("name", sorted(set(RECORDED["preflight"]) - {CRASHED}))
def test_the_table_and_verdict_are_the_recorded_ones(found, name):
    recorded, now = RECORDED["preflight"][name], found["preflight"][name]
    assert now.get("error") is None, now["error"]
    assert now["rows"] == recorded["rows"]
    assert parts_in_any_order(now["table"]) == parts_in_any_order(recorded["table"])
    assert now["verdict"] == recorded["verdict"]


def test_the_parts_are_listed_in_one_order(found):
    assert found["preflight"]["controller-and-node-all-pass"]["table"].startswith(
        "Preflight on controller-and-node-all-pass (cluster, driver, runtime)\n")


def test_a_node_without_containerd_shows_its_table(found):
    now = found["preflight"][CRASHED]
    assert now.get("error") is None and now["verdict"]["failed"]
    assert now["table"].startswith("Preflight on %s (runtime)\nSTATUS" % CRASHED)


@pytest.mark.parametrize("name", sorted(RECORDED["driver_versions"]))
def test_the_driver_versions_are_the_recorded_ones(found, name):
    recorded, now = RECORDED["driver_versions"][name], found["driver_versions"][name]
    assert now.get("error") is None, now["error"]
    assert dict((key, now["want"][key]) for key in recorded["want"]) == recorded["want"]
    assert now["plan"] == recorded["plan"]
