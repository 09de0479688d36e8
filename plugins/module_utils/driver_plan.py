# -*- coding: utf-8 -*-
# Apache-2.0
"""The nvidia_driver role's plan: which of its steps a node needs, from one
read of the node (nvidia_driver_info with every gather) against what the role
wants. A step is left out only when the read shows that every task in it
would change nothing; a step that cannot be judged from the read is planned.

    state: nvidia_driver_info's result (installed, unfinished, dpkg_interrupted,
           apt, driver, nvswitch_count, services, negative_pins, files, listed_dirs)
    want:  what the role's variables ask for (see plan()'s keys)
    ->     {"steps": {step: [reasons]} for the steps needed, "summary": one line}
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import hashlib
import os
import stat

# The role's steps, in their order (roles/nvidia_driver/tasks/main.yml).
STEPS = ("repair", "preferences", "repo", "pin", "kernel", "install", "verify")
FILE_TYPES = ((stat.S_ISREG, "file"), (stat.S_ISDIR, "directory"), (stat.S_ISLNK, "link"))


# ---------------------------------------------------------------- reading (on the node)
def parse_deb822(text):
    """The paragraphs of a deb822 file as [{field: value}] (continuation lines
    joined with a newline, comments left out)."""
    paragraphs, current, last = [], {}, None
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if not line.strip():
            if current:
                paragraphs.append(current)
            current, last = {}, None
        elif line[0] in " \t" and last:
            current[last] += "\n" + line.strip()
        elif ":" in line:
            key, value = line.split(":", 1)
            last = key.strip()
            current[last] = value.strip()
    if current:
        paragraphs.append(current)
    return paragraphs


def file_state(path):
    """What the plan needs of one path: exists, type, mode, uid, gid; for a
    regular file its sha256 and, for a deb822 `.sources` file, its parsed
    paragraphs. Never the text itself."""
    try:
        info = os.lstat(path)
    except OSError:
        return {"exists": False}
    kind = next((name for test, name in FILE_TYPES if test(info.st_mode)), "other")
    found = {"exists": True, "type": kind, "mode": "%04o" % stat.S_IMODE(info.st_mode),
             "uid": info.st_uid, "gid": info.st_gid}
    if kind == "file":
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except (IOError, OSError):
            return dict(found, unreadable=True)
        found["sha256"] = hashlib.sha256(data).hexdigest()
        if path.endswith(".sources"):
            try:
                found["paragraphs"] = parse_deb822(data.decode("utf-8"))
            except UnicodeDecodeError:
                found["paragraphs"] = None
    return found


# ---------------------------------------------------------------- planning (on the controller)
class _Files(object):
    """The read's files by path: a path read, or one in a folder the read listed
    whole (`listed_dirs`) and not found there (missing); None for a path not read."""

    def __init__(self, state):
        self.files = state.get("files", {})
        self.listed = set(state.get("listed_dirs", []))

    def get(self, path, default=None):
        if path in self.files:
            return self.files[path]
        if os.path.dirname(path) in self.listed:
            return {"exists": False}
        return default


def _file_differs(files, path, sha256, mode):
    """Why a file the role writes with copy (content, root:root, mode) is not as
    wanted, or None."""
    found = files.get(path)
    if found is None:
        return "%s was not read" % path
    if not found.get("exists"):
        return "%s is missing" % path
    if found.get("type") != "file" or found.get("unreadable"):
        return "%s is not a readable regular file" % path
    if sha256 is not None and found.get("sha256") != sha256:
        return "%s does not hold what the role writes" % path
    if found.get("mode") != mode or found.get("uid") != 0 or found.get("gid") != 0:
        return "%s is not root:root mode %s" % (path, mode)
    return None


def _repo_reasons(state, want, files):
    reasons = ["%s is not installed" % name for name in ("python3-debian", "cuda-keyring")
               if name not in state.get("installed", {})]
    keyring_list = files.get(want["keyring_list"], {"exists": True})
    if keyring_list.get("exists"):
        reasons.append("cuda-keyring's own entry %s is there" % want["keyring_list"])
    if want.get("auth_sha256"):
        why = _file_differs(files, want["auth_file"], want["auth_sha256"], "0600")
        if why:
            reasons.append("the mirror login: " + why)
    elif files.get(want["auth_file"], {"exists": True}).get("exists"):
        reasons.append("%s holds a mirror login no longer set" % want["auth_file"])
    sources = files.get(want["sources_file"])
    why = _file_differs(files, want["sources_file"], None, "0644")
    if why:
        reasons.append("the sources entry: " + why)
    elif (sources or {}).get("paragraphs") != [want["sources_fields"]]:
        found = ((sources or {}).get("paragraphs") or [{}])[0]
        fields = sorted(set(found) ^ set(want["sources_fields"])
                        | set(k for k in found if found[k] != want["sources_fields"].get(k)))
        reasons.append("the sources entry %s differs (%s)" % (want["sources_file"], ", ".join(fields) or "paragraphs"))
    return reasons


def _services_reasons(state, want):
    reasons = []
    services = state.get("services", {})
    wanted = []
    if want["persistenced"]:
        wanted.append("nvidia-persistenced")
    if want["fabricmanager"] == "always" or (want["fabricmanager"] == "auto" and (state.get("nvswitch_count") or 0) > 0):
        wanted.append("nvidia-fabricmanager")
    for unit in wanted:
        found = services.get(unit, {})
        if found.get("enabled") != "enabled" or found.get("active") != "active":
            reasons.append("%s is %s and %s" % (unit, found.get("enabled", "unknown"), found.get("active", "unknown")))
    return reasons


def plan(state, want):
    """The steps the node needs, each with its reasons. `want` keys: branch (int),
    pin_package, keyring_list, auth_file, auth_sha256 (None: no login),
    sources_file, sources_fields, blacklist_file, blacklist_sha256 (None: not
    managed), kernel_build (None: headers not managed), versions
    (nvidia_driver_versions over the same read), persistenced (bool),
    fabricmanager (auto, always, never)."""
    files = _Files(state)
    installed = state.get("installed", {})
    steps = dict((step, []) for step in STEPS)

    # A dpkg or apt run killed part way (this role's own install, most often): apt
    # refuses every install until it is finished, so it goes first.
    if state.get("dpkg_interrupted"):
        steps["repair"].append("dpkg was interrupted (its journal in /var/lib/dpkg/updates)")
    steps["repair"] += ["dpkg left %s %s %s" % (p["package"], p["version"], p["status"])
                        for p in state.get("unfinished", [])]
    steps["preferences"] = ["%s line %s ('%s', Pin-Priority %s) blocks NVIDIA's repository"
                            % (pin["file"], pin["line"], pin["pin"], pin["priority"])
                            for pin in state.get("negative_pins", [])]
    steps["repo"] = _repo_reasons(state, want, files)

    others = sorted(name for name in installed
                    if name.startswith("nvidia-driver-pinning-") and name != want["pin_package"])
    if want["pin_package"] not in installed:
        steps["pin"].append("%s is not installed" % want["pin_package"])
    if others:
        steps["pin"].append("another branch's pin is installed: %s" % ", ".join(others))

    if want.get("blacklist_sha256"):
        why = _file_differs(files, want["blacklist_file"], want["blacklist_sha256"], "0644")
        if why:
            steps["kernel"].append("the nouveau blacklist: " + why)
    if want.get("kernel_build") and not files.get(want["kernel_build"], {}).get("exists"):
        steps["kernel"].append("no kernel headers: %s is missing" % want["kernel_build"])

    versions = want["versions"]
    driver = state.get("driver", {})
    if not versions.get("driver"):
        steps["install"].append("apt offers no driver of branch %s yet" % want["branch"])
    elif versions.get("plan"):
        steps["install"].append("to install: " + ", ".join(versions["plan"]))
    if driver.get("state") == "mismatch":
        steps["install"].append("the driver installed is not the one loaded")
    before = [step for step in ("repair", "preferences", "repo", "pin") if steps[step]]
    if before and not steps["install"]:
        steps["install"].append("apt is read again after the %s step" % "/".join(before))

    if driver.get("state") != "ok" or driver.get("branch") != want["branch"]:
        steps["verify"].append("the loaded driver is %s" % (driver.get("version") or driver.get("state") or "unknown"))
    steps["verify"] += _services_reasons(state, want)
    if steps["install"] and not steps["verify"]:
        steps["verify"].append("the driver is checked again after the install step")

    needed = dict((step, reasons) for step, reasons in steps.items() if reasons)
    if needed:
        summary = "; ".join("%s (%s)" % (step, "; ".join(needed[step])) for step in STEPS if step in needed)
    else:
        summary = "nothing to do: driver %s of branch %s loaded, every step converged" % (
            driver.get("version"), want["branch"])
    return {"steps": needed, "summary": summary}
