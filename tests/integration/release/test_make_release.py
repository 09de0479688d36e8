"""`make release VERSION=x.y.z` on a throwaway clone of this tree (never on the
tree itself): the refusals leave the clone as it was, a release sets the
version, builds the changelog from the fragments, the tarball and its sha256,
commits and tags. The test command is replaced with RELEASE_TEST_COMMAND (a
marker file) so the release does not run the whole test suite again."""
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]


def git(cwd, *args):
    return subprocess.run(["git", *args], cwd=cwd, check=True, text=True, capture_output=True).stdout


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A clone whose last commit is this working tree (tracked and new files)."""
    path = tmp_path_factory.mktemp("release") / "smshare-kai"
    git(REPO, "clone", "-q", "--no-hardlinks", str(REPO), str(path))
    wanted = set(git(REPO, "ls-files", "-co", "--exclude-standard", "-z").split("\0")) - {""}
    for rel in set(git(path, "ls-files", "-z").split("\0")) - {""} - wanted:
        (path / rel).unlink()
    for rel in wanted:
        src = REPO / rel
        if src.is_file() or src.is_symlink():
            (path / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, path / rel, follow_symlinks=False)
    git(path, "config", "user.email", "release-test@example.invalid")
    git(path, "config", "user.name", "release test")
    git(path, "add", "-A")
    git(path, "commit", "-q", "--allow-empty", "-m", "the working tree under test")
    # The venvs are this clone's (bootstrap finds them current and installs nothing; it only
    # re-links .venv-oldest's collections, to the resolved .venv).
    # (.gitignore names both, links included.)
    for venv in (".venv", ".venv-oldest"):
        (path / venv).symlink_to(REPO / venv)
    return path


def make_release(clone, version, **env_vars):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "RELEASE_"))}
    env.update(env_vars)
    argv = ["make", "--no-print-directory", "release"] + (["VERSION=" + version] if version is not None else [])
    proc = subprocess.run(argv, cwd=clone, env=env, text=True, capture_output=True, check=False, timeout=600)
    return proc.returncode, proc.stdout + proc.stderr


def state(clone):
    """What a refused release must leave unchanged."""
    return {"head": git(clone, "rev-parse", "HEAD"), "status": git(clone, "status", "--porcelain"),
            "tags": git(clone, "tag", "-l"), "galaxy": (clone / "galaxy.yml").read_text(),
            "dist": sorted(p.name for p in (clone / "dist").glob("*")) if (clone / "dist").is_dir() else []}


def changelog_text(clone):
    """CHANGELOG.md without Markdown's backslash escapes."""
    return re.sub(r"\\(.)", r"\1", (clone / "CHANGELOG.md").read_text())


def galaxy_version(clone):
    return yaml.safe_load((clone / "galaxy.yml").read_text())["version"]


@pytest.mark.parametrize("version, message", [
    (None, "give the version"),
    ("1.0", "is not a semantic version"),
    ("v1.0.0", "is not a semantic version"),
    ("0.1.0", "is not newer than galaxy.yml's 0.1.0"),
    ("0.0.9", "is not newer than galaxy.yml's 0.1.0"),
])
def test_bad_versions_are_refused_and_nothing_changes(clone, version, message):
    before = state(clone)
    rc, out = make_release(clone, version, RELEASE_TEST_COMMAND="false")
    assert rc != 0 and message in out, out
    assert state(clone) == before


def test_a_dirty_tree_is_refused(clone):
    (clone / "notes.txt").write_text("uncommitted\n")
    try:
        before = state(clone)
        rc, out = make_release(clone, "0.2.0", RELEASE_SKIP_TESTS="1")
        assert rc != 0 and "uncommitted changes" in out and "notes.txt" in out, out
        assert state(clone) == before
    finally:
        (clone / "notes.txt").unlink()


def test_a_failing_test_command_stops_the_release(clone):
    before = state(clone)
    rc, out = make_release(clone, "0.2.0", RELEASE_TEST_COMMAND="echo the tests ran; exit 3")
    assert rc != 0 and "the tests ran" in out and "the test command failed" in out, out
    assert state(clone) == before


def test_release_sets_version_changelog_tarball_checksum_commit_and_tag(clone, tmp_path):
    fragments = sorted(p.name for p in (clone / "changelogs" / "fragments").glob("*.yml"))
    assert fragments, "the clone has no changelog fragments to release"
    marker = tmp_path / "tests-ran"
    rc, out = make_release(clone, "0.2.0", RELEASE_TEST_COMMAND="touch %s" % marker)
    assert rc == 0, out
    assert marker.exists(), "the test command did not run"
    assert galaxy_version(clone) == "0.2.0"

    # The changelog: the release, with every fragment's entries, and how it was tested.
    changes = yaml.safe_load((clone / "changelogs" / "changelog.yaml").read_text())
    release = changes["releases"]["0.2.0"]
    assert sorted(release["fragments"]) == sorted(fragments + ["0.2.0-release-summary.yml"])
    assert "Tested with ``touch" in release["changes"]["release_summary"]
    assert "NOT the whole test command" in release["changes"]["release_summary"]
    assert not list((clone / "changelogs" / "fragments").glob("*.yml")), "released fragments stay behind"
    assert (clone / "changelogs" / "fragments" / ".keep").exists(), "the next fragment has no folder to go in"
    markdown = changelog_text(clone)
    assert "## v0.2.0" in markdown and "Tested with <code>touch" in markdown
    # An entry of a released fragment (its opening words: the Markdown may wrap the rest).
    entry = yaml.safe_load((REPO / "changelogs" / "fragments" / "images.yml").read_text())["major_changes"][0]
    assert " ".join(entry.split()[:8]) in " ".join(markdown.split()), markdown[-3000:]

    # The artifact and its checksum.
    tarball = clone / "dist" / "smshare-kai-0.2.0.tar.gz"
    recorded = (clone / "dist" / "smshare-kai-0.2.0.tar.gz.sha256").read_text().split()
    assert recorded == [hashlib.sha256(tarball.read_bytes()).hexdigest(), tarball.name]
    with tarfile.open(tarball) as tar:
        manifest = json.load(io.TextIOWrapper(tar.extractfile("MANIFEST.json")))
        names = tar.getnames()
    assert manifest["collection_info"]["version"] == "0.2.0"
    assert "CHANGELOG.md" in names and "plugins/modules/gpu_info.py" in names
    assert not [n for n in names if n.startswith(("tests/integration", "dist/", "lab/", ".venv"))]
    # The release stage installed this tarball and ran a playbook from it.
    assert "Report and check GPU node facts" in out and "failed=0" in out, out

    # Committed and tagged; the tree is clean; the publishing steps are printed.
    assert git(clone, "status", "--porcelain") == ""
    assert git(clone, "log", "-1", "--format=%s") == "Release 0.2.0\n"
    assert git(clone, "tag", "-l") == "v0.2.0\n"
    assert "Publish:" in out and "dist/smshare-kai-0.2.0.tar.gz.sha256" in out and "git push origin HEAD v0.2.0" in out

    # The same version again is not newer.
    rc, out = make_release(clone, "0.2.0", RELEASE_SKIP_TESTS="1")
    assert rc != 0 and "is not newer than galaxy.yml's 0.2.0" in out, out


def test_a_failure_after_the_version_bump_puts_the_tree_back(clone):
    bad = clone / "changelogs" / "fragments" / "broken.yml"
    bad.write_text("minor_changes: 5\n")
    git(clone, "add", "-A")
    git(clone, "commit", "-q", "-m", "a malformed fragment")
    before = state(clone)
    rc, out = make_release(clone, "0.3.0", RELEASE_SKIP_TESTS="1")
    assert rc != 0 and "restoring the tree" in out, out
    assert state(clone) == before and galaxy_version(clone) == "0.2.0"
    git(clone, "revert", "--no-edit", "HEAD")


def test_a_release_without_tests_says_so_in_the_notes(clone):
    (clone / "changelogs" / "fragments" / "ee.yml").write_text(
        "minor_changes:\n  - execution environment - a test entry.\n")
    git(clone, "add", "-A")
    git(clone, "commit", "-q", "-m", "a fragment")
    rc, out = make_release(clone, "0.3.0", RELEASE_SKIP_TESTS="1")
    assert rc == 0, out
    assert "test command SKIPPED" in out
    changes = yaml.safe_load((clone / "changelogs" / "changelog.yaml").read_text())
    assert set(changes["releases"]) == {"0.2.0", "0.3.0"}
    assert "WITHOUT running the test command" in changes["releases"]["0.3.0"]["changes"]["release_summary"]
    markdown = changelog_text(clone)
    assert "## v0.3.0" in markdown and "## v0.2.0" in markdown and "a test entry" in markdown
    assert "WITHOUT running the test command" in markdown
    assert git(clone, "tag", "-l").split() == ["v0.2.0", "v0.3.0"]
