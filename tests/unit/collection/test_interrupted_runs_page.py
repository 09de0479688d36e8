# Apache-2.0
"""docs/interrupted-runs.md names the test behind each claim: every test it names exists."""
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PAGE = REPO / "docs" / "interrupted-runs.md"


def named_tests():
    """(path, test name) for each `path::name` and each `::name` after it on one line."""
    found = []
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        path = None
        for ref in re.findall(r"`((?:tests/[^`:]+\.py)?::[A-Za-z0-9_]+)(?:\[[^`]*\])?`", line):
            file, name = ref.split("::")
            path = file or path
            assert path, "a `::name` without a file before it: " + line
            found.append((path, name))
    return found


def test_the_page_names_tests():
    assert len(named_tests()) >= 30


def test_every_test_the_page_names_exists():
    missing = []
    for path, name in named_tests():
        file = REPO / path
        if not file.is_file() or not re.search(r"^def %s\(" % re.escape(name), file.read_text(encoding="utf-8"), re.M):
            missing.append("%s::%s" % (path, name))
    assert not missing, "docs/interrupted-runs.md names tests that do not exist: " + ", ".join(missing)
