"""lab/smshare_lab/build.py: which `kubernetes` source version the lab builds, asked of apt.
A fake apt stands in for the machine's: an `apt-get update` takes a while, and until it ran
after the deb-src entry was written, `apt-cache showsrc` fails as apt does."""
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "lab"))

# the names only: importing must not claim a lab instance (instances.py) for this process
_claim = os.environ.get("SMSHARE_LAB_NO_CLAIM")
os.environ["SMSHARE_LAB_NO_CLAIM"] = "1"
from smshare_lab import build  # noqa: E402  pylint: disable=wrong-import-position
if _claim is None:
    del os.environ["SMSHARE_LAB_NO_CLAIM"]


class FakeApt(object):
    def __init__(self, entry=False, lists=False):
        self.entry, self.lists, self.updates, self.asked_without_lists = entry, lists, 0, 0

    def run(self, argv, check=True, capture=False, **_kwargs):
        if argv[:1] == ["apt-get"] and "update" in argv:
            time.sleep(0.3)
            self.lists, self.updates = self.entry, self.updates + 1
            return subprocess.CompletedProcess(argv, 0, "", "")
        if argv[:2] == ["apt-cache", "showsrc"]:
            if not self.lists:
                self.asked_without_lists += 1
                return subprocess.CompletedProcess(
                    argv, 100, "", "E: You must put some 'deb-src' URIs in your sources.list\n")
            return subprocess.CompletedProcess(
                argv, 0, "Package: kubernetes\nVersion: 1.20.5+really1.20.2-1.1\n\nPackage: kubernetes\n"
                "Version: 1.20.5+really1.20.2-1.1+deb12u1\n", "")
        if argv[:2] == ["dpkg", "--compare-versions"]:
            return subprocess.CompletedProcess(argv, 0 if argv[2].endswith("deb12u1") else 1, "", "")
        raise AssertionError(f"unexpected command {argv}")


@pytest.fixture
def apt(tmp_path, monkeypatch):
    fake = FakeApt()
    entry = tmp_path / "smshare-lab-deb-src.sources"

    class Entry(object):
        """The deb-src file: writing it is what the fake apt sees."""

        @staticmethod
        def write_text(text):
            fake.entry = True
            return len(text)

        def __str__(self):
            return str(entry)

    monkeypatch.setattr(build, "APT_SOURCES_LOCK", tmp_path / "apt-sources.lock")
    monkeypatch.setattr(build, "DEB_SRC_FILE", Entry())
    monkeypatch.setattr(build, "_has_deb_src", lambda: fake.entry)
    monkeypatch.setattr(build, "run", fake.run)
    monkeypatch.setattr(build, "say", lambda msg: None)
    return fake


def test_a_fresh_machine_gets_the_entry_and_the_newest_version(apt):
    assert build.source_version() == "1.20.5+really1.20.2-1.1+deb12u1"
    assert apt.entry and apt.updates == 1


def test_two_labs_starting_at_once_both_find_the_version(apt):
    found, errors = [], []

    def start():
        try:
            found.append(build.source_version())
        except Exception as exc:  # pylint: disable=broad-except
            errors.append(exc)

    threads = [threading.Thread(target=start), threading.Thread(target=start)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert found == ["1.20.5+really1.20.2-1.1+deb12u1"] * 2
    assert apt.updates == 1 and apt.asked_without_lists == 0


def test_an_entry_whose_update_never_ran_is_updated_now(apt):
    apt.entry = True   # written by a run stopped before its apt-get update
    assert build.source_version() == "1.20.5+really1.20.2-1.1+deb12u1"
    assert apt.updates == 1


def test_apt_without_the_source_package_is_named_with_what_apt_said(apt, monkeypatch):
    apt.entry = apt.lists = True
    monkeypatch.setattr(build, "_source_versions", lambda: ([], "E: Unable to find a source package"))
    with pytest.raises(build.LabError, match=r"apt knows no `kubernetes` source package.*\(apt-cache: E: Unable"):
        build.source_version()


def test_a_lab_waiting_on_another_says_so(apt, monkeypatch):
    said = []
    monkeypatch.setattr(build, "say", said.append)
    with open(build.APT_SOURCES_LOCK, "w") as held:
        build.fcntl.flock(held, build.fcntl.LOCK_EX)
        waiting = threading.Thread(target=build.source_version)
        waiting.start()
        time.sleep(0.5)
        assert any("another lab is setting up apt's source lists" in line for line in said), said
        assert waiting.is_alive() and not apt.entry
    waiting.join(30)
    assert apt.entry and not waiting.is_alive()
