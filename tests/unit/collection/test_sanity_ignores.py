# Apache-2.0
"""The sanity ignore files ship in the tarball and `ansible-test sanity` runs on
the tarball's contents (scripts/sanity.sh), so they name shipped files only: an
entry for a file galaxy.yml's build_ignore leaves out is an `ignores` error
there. Files that stay home (lab/, benchmarks/, ...) meet pep8 and pylint with
no ignore entry (the sanity stage's second run)."""
import fnmatch
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
BUILD_IGNORE = yaml.safe_load((REPO / "galaxy.yml").read_text())["build_ignore"]
IGNORE_FILES = sorted((REPO / "tests" / "sanity").glob("ignore-*.txt"))
TRACKED = set(subprocess.run(["git", "ls-files"], cwd=REPO, text=True, capture_output=True,
                             check=True).stdout.splitlines())


def shipped(path):
    """As ansible-galaxy's build walks the tree: a file is left out when it, or a
    folder above it, matches a build_ignore pattern (fnmatch on the relative path)."""
    parts = path.split("/")
    return not any(fnmatch.fnmatch("/".join(parts[:n]), pattern)
                   for n in range(1, len(parts) + 1) for pattern in BUILD_IGNORE)


def entries(ignore_file):
    for number, line in enumerate(ignore_file.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip() and not line.startswith("#"):
            yield number, line.split()[0]


@pytest.mark.parametrize("ignore_file", IGNORE_FILES, ids=lambda p: p.name)
def test_every_entry_names_a_shipped_file(ignore_file):
    wrong = ["%s:%d %s" % (ignore_file.name, n, path) for n, path in entries(ignore_file)
             if path not in TRACKED or not shipped(path)]
    assert not wrong, "not in the tarball: %s" % wrong


def test_the_build_ignore_reading_matches_ansible_galaxy():
    assert not shipped("lab/labctl") and not shipped("tests/integration/release/test_make_release.py")
    assert not shipped("benchmarks/lab_start.py") and not shipped(".lab-second/x")
    assert not shipped(".venv-oldest/bin/ansible") and not shipped(".venv/bin/ansible")
    assert shipped("plugins/modules/gpu_info.py") and shipped("tests/unit/collection/test_sanity_ignores.py")
