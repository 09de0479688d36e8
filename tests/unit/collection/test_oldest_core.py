# Apache-2.0
"""meta/runtime.yml's requires_ansible is what the oldest-core stage runs
(scripts/test.sh): requirements/python-oldest.txt pins exactly that
ansible-core, and every other package at python.txt's version, so the two
runs differ in ansible-core alone."""
import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]


def pins(name):
    found = {}
    for line in (REPO / "requirements" / name).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            package, version = line.split("==")
            found[package.lower().replace("_", "-")] = version
    return found


def test_the_oldest_venv_pins_the_claimed_ansible_core():
    claim = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())["requires_ansible"]
    lower = re.fullmatch(r">=(\d+\.\d+\.\d+)", claim)
    assert lower, "requires_ansible %r: one lower bound (>=X.Y.Z) is what the oldest-core stage can test" % claim
    assert pins("python-oldest.txt")["ansible-core"] == lower.group(1)


def test_every_other_pin_is_the_main_venvs():
    main, oldest = pins("python.txt"), pins("python-oldest.txt")
    assert "ansible" not in oldest      # the package would bring its own ansible-core
    differ = {p: (v, main.get(p)) for p, v in oldest.items() if p != "ansible-core" and main.get(p) != v}
    assert not differ, "python-oldest.txt pins differ from python.txt (oldest, main): %s" % differ
