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
os.environ.setdefault("SMSHARE_LAB_NO_CLAIM", "1")   # no lab instance is claimed by importing the lab's code

from smshare_lab import build  # noqa: E402  pylint: disable=wrong-import-position


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

    def out(self, argv, **_kwargs):
        done = self.run(argv)
        if done.returncode:
            raise build.LabError(f"command failed (rc={done.returncode}): {' '.join(argv)}\n{done.stderr}")
        return done.stdout


@pytest.fixture
def apt(tmp_path, monkeypatch):
    fake = FakeApt()
    entry = tmp_path / "smshare-lab-deb-src.sources"

    def write_entry(text):
        fake.entry = True
        return len(text)

    monkeypatch.setattr(build, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(build, "DEB_SRC_FILE", type("Entry", (), {"write_text": staticmethod(write_entry),
                                                                   "__str__": lambda self: str(entry)})())
    monkeypatch.setattr(build, "_has_deb_src", lambda: fake.entry)
    monkeypatch.setattr(build, "run", fake.run)
    monkeypatch.setattr(build, "out", fake.out, raising=False)   # what the code before the lock called
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

    threads = [threading.Thread(target=start) for _ in range(2)]
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


def test_apt_without_the_source_package_is_named(apt, monkeypatch):
    apt.entry = apt.lists = True
    monkeypatch.setattr(build, "_source_versions", lambda: [])
    with pytest.raises(build.LabError, match="apt knows no `kubernetes` source package"):
        build.source_version()
