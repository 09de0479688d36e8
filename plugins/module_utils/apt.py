# -*- coding: utf-8 -*-
# Apache-2.0
"""apt and dpkg as the driver modules read them: installed packages
(dpkg-query), what apt would install (apt-cache policy) and the preferences
records that give a repository a negative priority (/etc/apt/preferences.d).

Parsers are pure functions of the tools' text (unit-tested on recorded
output); the readers run the tools through runner.py with `--` before the
package names.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import os
import re

from ansible_collections.smshare.kai.plugins.module_utils.runner import CommandRunner, ToolError

# Debian policy 5.6.1: lowercase letters, digits, + - . ; at least two characters.
PACKAGE_NAME = r"[a-z0-9][a-z0-9+.-]+"
# What apt reads in preferences.d: no extension or ".pref", names of [A-Za-z0-9_.-].
PREFERENCES_FILE_NAME = re.compile(r"[A-Za-z0-9_.-]+")

POLICY_PACKAGE_RE = re.compile(r"(\S+):")
POLICY_FIELD_RE = re.compile(r"  (Installed|Candidate|Package pin): (\S+)")
POLICY_VERSION_RE = re.compile(r" (\*\*\*| {3}) (\S+) (-?\d+)")
POLICY_SOURCE_RE = re.compile(r" {8}(-?\d+) (\S.*)")
DPKG_FORMAT = "${db:Status-Abbrev}\t${Package}\t${Version}\n"


class AptError(ToolError):
    """A failed or unparsable dpkg-query / apt-cache call."""


def upstream_version(version):
    """The upstream part of a Debian version: no epoch, no Debian revision.

    '615.71.09-0ubuntu1' and '1:615.71.09-1' both give '615.71.09'.
    """
    if not version:
        return ""
    version = version.split(":", 1)[1] if ":" in version else version
    return version.rsplit("-", 1)[0] if "-" in version else version


# ---------------------------------------------------------------- the driver's versions
DRIVER_PACKAGE = "nvidia-driver-open"
FABRICMANAGER_PACKAGE = "nvidia-fabricmanager"
NSCQ_PACKAGE = "libnvidia-nscq"


def _branch_number(branch):
    try:
        return int(str(branch).strip())
    except ValueError:
        return int(float(str(branch)))


def _offered(entry, upstream):
    """A package at an upstream version: the installed one when its upstream is that,
    else the newest offered one that is (apt lists newest first); "" for none."""
    installed = entry.get("installed")
    if installed and installed.get("upstream") == upstream:
        return installed["version"]
    return next((v["version"] for v in entry.get("versions") or [] if v.get("upstream") == upstream), "")


def driver_versions(offer, branch, version=None, fabricmanager="auto", nscq=True):
    """The nvidia_driver role's choice of what to install, from nvidia_driver_info's
    result (`offer`: apt's view of the driver, Fabric Manager and NSCQ, the
    installed packages, the NVSwitches).

    The driver: the offered Debian version of `version` (an upstream version) when
    given; else the installed one when it is of the branch (a re-run never
    upgrades by itself); else apt's candidate. It is "" when that is not of the
    branch or nothing is offered (in check mode, before the repository is in
    place). Fabric Manager (`fabricmanager`: always, never, or auto: where
    NVSwitches are) and with it NSCQ (`nscq`) at the driver's upstream version,
    whatever their Debian revisions. Returns {driver, upstream, fabricmanager
    (wanted), fabricmanager_version, nscq_version, packages (name=version to be
    installed), plan (those not installed yet, in the same order)}."""
    offer = offer or {}
    apt_view = offer.get("apt") or {}
    driver = apt_view.get(DRIVER_PACKAGE) or {}
    prefix = "%d." % _branch_number(branch)
    if version is not None:
        chosen = next((v["version"] for v in driver.get("versions") or [] if v.get("upstream") == str(version)), "")
    elif driver.get("installed") and str(driver["installed"].get("upstream") or "").startswith(prefix):
        chosen = driver["installed"]["version"]
    else:
        chosen = (driver.get("candidate") or {}).get("version") or ""
    upstream = upstream_version(chosen)
    wanted_fm = fabricmanager == "always" or (fabricmanager == "auto" and (offer.get("nvswitch_count") or 0) > 0)
    choice = {"driver": chosen if upstream.startswith(prefix) else "", "upstream": upstream,
              "fabricmanager": wanted_fm,
              "fabricmanager_version": _offered(apt_view.get(FABRICMANAGER_PACKAGE) or {}, upstream),
              "nscq_version": _offered(apt_view.get(NSCQ_PACKAGE) or {}, upstream)}
    packages = ["%s=%s" % (DRIVER_PACKAGE, choice["driver"])]
    if wanted_fm:
        packages.append("%s=%s" % (FABRICMANAGER_PACKAGE, choice["fabricmanager_version"]))
        if nscq:
            packages.append("%s=%s" % (NSCQ_PACKAGE, choice["nscq_version"]))
    installed = set("%s=%s" % (name, value) for name, value in (offer.get("installed") or {}).items())
    choice.update(packages=packages, plan=[p for p in packages if p not in installed])
    return choice


# ---------------------------------------------------------------- apt-cache policy
def parse_policy(text):
    """`apt-cache policy NAME...` -> {name: {installed, candidate, versions}}.

    versions: [{"version", "priority", "installed", "sources": [(priority, where)]}]
    in apt's order (newest first). Names apt does not know are absent. A line
    of any other shape raises ValueError: a changed format is an error, never
    a guess.
    """
    result = {}
    current = None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        package = POLICY_PACKAGE_RE.fullmatch(line)
        if package:
            current = result.setdefault(package.group(1),
                                        {"installed": None, "candidate": None, "versions": []})
            continue
        if current is None:
            raise ValueError("line %d before any package: %r" % (number, line))
        field = POLICY_FIELD_RE.fullmatch(line)
        version = POLICY_VERSION_RE.fullmatch(line)
        source = POLICY_SOURCE_RE.fullmatch(line)
        if field:
            value = None if field.group(2) == "(none)" else field.group(2)
            if field.group(1) != "Package pin":
                current[field.group(1).lower()] = value
        elif line == "  Version table:":
            continue
        elif version:
            current["versions"].append({"version": version.group(2), "priority": int(version.group(3)),
                                        "installed": version.group(1) == "***", "sources": []})
        elif source and current["versions"]:
            current["versions"][-1]["sources"].append((int(source.group(1)), source.group(2)))
        else:
            raise ValueError("line %d: %r" % (number, line))
    return result


# ---------------------------------------------------------------- dpkg-query
def parse_installed(text):
    """dpkg-query -W -f=DPKG_FORMAT output -> {name: version} of installed packages."""
    packages = {}
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) == 3 and fields[0].startswith("ii"):
            packages[fields[1]] = fields[2]
    return packages


# dpkg's status (the second letter of db:Status-Abbrev) of a package it left part way:
# a dpkg or apt killed mid-run, or a maintainer script that failed. apt refuses to
# install anything else until `dpkg --configure -a` / `apt-get -f install` finish them.
UNFINISHED = {"U": "unpacked, not configured", "F": "half-configured", "H": "half-installed",
              "W": "awaiting triggers", "t": "with triggers pending"}
# dpkg's journal of a run it did not finish (files named by number); while it holds
# one, apt says "dpkg was interrupted, you must manually run 'dpkg --configure -a'".
DPKG_UPDATES_DIR = "/var/lib/dpkg/updates"


def parse_unfinished(text):
    """dpkg-query -W -f=DPKG_FORMAT output -> [{package, version, status}] of the packages
    dpkg left part way (UNFINISHED, or marked reinst-required), in dpkg's order."""
    found = []
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) != 3 or len(fields[0]) < 2:
            continue
        status = UNFINISHED.get(fields[0][1])
        if fields[0][2:3] == "R":
            status = (status + ", " if status else "") + "needing a reinstall"
        if status:
            found.append({"package": fields[1], "version": fields[2], "status": status})
    return found


def dpkg_interrupted(updates_dir=None):
    """Whether dpkg's journal (DPKG_UPDATES_DIR) holds a run it did not finish."""
    try:
        return any(name.isdigit() for name in os.listdir(updates_dir or DPKG_UPDATES_DIR))
    except OSError:
        return False


class Apt:
    """Reads dpkg's and apt's view of packages on this host."""

    def __init__(self, module):
        self.dpkg_query = CommandRunner(module, "dpkg-query")
        self.apt_cache = CommandRunner(module, "apt-cache")

    def _run(self, runner, args):
        if not runner.available:
            raise AptError("%s is not installed: this module needs a Debian-family host (dpkg and apt)"
                           % runner.binary, kind="not_debian")
        return runner.run(args)

    def installed(self, patterns):
        """{name: version} of the installed packages matching the dpkg patterns."""
        result = self._run(self.dpkg_query, ["-W", "-f=" + DPKG_FORMAT, "--"] + list(patterns))
        # rc 1: some pattern matched nothing; the others are still listed.
        if result.rc not in (0, 1):
            raise AptError("dpkg-query failed (rc=%d): %s" % (result.rc, result.stderr.strip()),
                           result, kind="dpkg_query_failed")
        return parse_installed(result.stdout)

    def unfinished(self):
        """parse_unfinished() over every package dpkg knows."""
        result = self._run(self.dpkg_query, ["-W", "-f=" + DPKG_FORMAT])
        if result.rc != 0:
            raise AptError("dpkg-query failed (rc=%d): %s" % (result.rc, result.stderr.strip()),
                           result, kind="dpkg_query_failed")
        return parse_unfinished(result.stdout)

    def policy(self, names):
        """parse_policy() of `apt-cache policy -- NAMES`; unknown names map to
        no candidate and no versions."""
        if not names:
            return {}
        result = self._run(self.apt_cache, ["policy", "--"] + list(names))
        if result.rc != 0:
            raise AptError("apt-cache policy failed (rc=%d): %s" % (result.rc, result.stderr.strip()),
                           result, kind="apt_cache_failed")
        try:
            parsed = parse_policy(result.stdout)
        except ValueError as exc:
            raise AptError("unexpected output of apt-cache policy (%s)" % exc, result, kind="unparsable")
        return dict((name, parsed.get(name, {"installed": None, "candidate": None, "versions": []}))
                    for name in names)


# ---------------------------------------------------------------- preferences
# apt's `Pin: release o=/l=` names of NVIDIA's repository.
NVIDIA_RELEASE_ORIGINS = ("NVIDIA", "NVIDIA CUDA")
# A host name as apt shows it in `Pin: origin` (a port allowed).
ORIGIN_HOST_NAME = r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?"


def preference_files(folder):
    """The files apt reads: the single file beside the folder, then the folder's
    files without an extension or ending in .pref, in name order."""
    single = os.path.join(os.path.dirname(folder.rstrip("/")), "preferences")
    files = [single] if os.path.isfile(single) else []
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        names = []
    for name in names:
        path = os.path.join(folder, name)
        if os.path.isfile(path) and PREFERENCES_FILE_NAME.fullmatch(name) and \
                ("." not in name or name.endswith(".pref")):
            files.append(path)
    return files


def records(text):
    """Yield each record as [(line number, line)], blank lines separating records."""
    current = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            current.append((number, line))
        elif current:
            yield current
            current = []
    if current:
        yield current


def record_fields(record):
    """{lower-case field: (line number, value)}; comments skipped, first one wins."""
    fields = {}
    for number, line in record:
        if line.lstrip().startswith("#") or ":" not in line:
            continue
        key, value = line.split(":", 1)
        fields.setdefault(key.strip().lower(), (number, value.strip()))
    return fields


def pin_names_origin(pin, origins, release_origins):
    """Whether a Pin value selects one of the origins (host names of
    `Pin: origin`) or release origins/labels (`Pin: release o=...,l=...`)."""
    kind, _sep, rest = pin.partition(" ")
    if kind == "origin":
        return rest.strip().strip('"') in origins
    if kind == "release":
        for item in rest.split(","):
            key, _sep, value = item.strip().partition("=")
            if key in ("o", "l") and value.strip().strip('"') in release_origins:
                return True
    return False


def package_field_matches(value, names):
    """Whether a Package field (names, globs or /regex/) selects any of `names`."""
    for pattern in value.split():
        if len(pattern) > 2 and pattern.startswith("/") and pattern.endswith("/"):
            try:
                regex = re.compile(pattern[1:-1])
            except re.error:
                continue
            if any(regex.search(name) for name in names):
                return True
        elif any(fnmatch.fnmatchcase(name, pattern) for name in names):
            return True
    return False


def negative_pins(path, text, origins, release_origins, packages):
    """Records of one preferences file that give the origins a negative
    priority for any of `packages`: [{file, line, pin, priority, lines}]."""
    found = []
    for record in records(text):
        fields = record_fields(record)
        if not {"package", "pin", "pin-priority"} <= set(fields):
            continue
        try:
            priority = int(fields["pin-priority"][1])
        except ValueError:
            continue
        if priority < 0 and pin_names_origin(fields["pin"][1], origins, release_origins) and \
                package_field_matches(fields["package"][1], packages):
            found.append({"file": path, "line": fields["pin"][0], "pin": "Pin: " + fields["pin"][1],
                          "package": fields["package"][1], "priority": priority,
                          "lines": [record[0][0], record[-1][0]]})
    return found


def find_negative_pins(folder, origins, release_origins, packages):
    """[(path, text, [pins])] for each preferences file apt reads from `folder`
    (and the single file beside it) that has records negative_pins() finds."""
    found = []
    for path in preference_files(folder):
        try:
            with open(path) as handle:
                text = handle.read()
        except (IOError, OSError, UnicodeDecodeError):
            continue  # apt cannot read it either
        pins = negative_pins(path, text, origins, release_origins, packages)
        if pins:
            found.append((path, text, pins))
    return found


def without_records(text, spans):
    """The text without the lines of the given (first, last) spans (a comment
    inside a record goes with it); blank lines left behind are squeezed.
    Returns (text, has_records_left)."""
    kept = [line for number, line in enumerate(text.splitlines(True), 1)
            if not any(first <= number <= last for first, last in spans)]
    after = re.sub(r"\n{3,}", "\n\n", "".join(kept)).strip("\n")
    left = any(line.strip() and not line.lstrip().startswith("#") for line in after.splitlines())
    return (after + "\n" if after else ""), left
