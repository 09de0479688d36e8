# Apache-2.0
"""Until the first release, the changelog fragments describe a first release:
what the collection brings (major and minor changes) and what is known not to
work or not tested. Nobody had an earlier version, so nothing can have broken,
been deprecated, removed or fixed for a user: a change to something unreleased
is described as the feature it now is. The fragments pass antsibull-changelog's
own lint."""
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
FRAGMENTS = sorted((REPO / "changelogs" / "fragments").glob("*.yml"))
RELEASED = (yaml.safe_load((REPO / "changelogs" / "changelog.yaml").read_text()) or {}).get("releases") or {}
FIRST_RELEASE_SECTIONS = {"major_changes", "minor_changes", "known_issues", "trivial"}


@pytest.mark.parametrize("fragment", FRAGMENTS, ids=lambda p: p.name)
def test_a_first_release_only_adds(fragment):
    # Once a release exists, later ones may break, deprecate, remove and fix: this test goes with it
    # (as tests/unit/collection/test_version_added.py's first test).
    assert RELEASED == {}
    sections = set(yaml.safe_load(fragment.read_text(encoding="utf-8")) or {})
    # release_summary is written by scripts/release.sh (antsibull-changelog takes one).
    assert sections <= FIRST_RELEASE_SECTIONS, (
        "%s: %s in a first release: nobody had the earlier behaviour; describe what the collection does now "
        "as major_changes/minor_changes" % (fragment.name, ", ".join(sorted(sections - FIRST_RELEASE_SECTIONS))))


def test_fragments_pass_antsibull_changelog_lint():
    proc = subprocess.run(["antsibull-changelog", "lint"], cwd=REPO, text=True, capture_output=True, check=False)
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr
