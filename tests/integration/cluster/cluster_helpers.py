"""Helpers shared by the cluster directory's lab tests (converge, smoke test, uninstall)."""
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import yaml

from lab_helpers import describe, recap

PLAYBOOKS = "tests/integration/cluster/playbooks"
FINALIZER = "gpu-fractioning.nvidia.com/cleanup-node-conditions"
NODE_CONDITION = "gpu-fractioning.nvidia.com/Ready"
CONFIG = "gpufractioningconfigs.gpu-fractioning.kai.scheduler"


def kube_json(lab, *args):
    proc = lab.kubectl(*args, "-o", "json", check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def releases(lab):
    """{name: (status, revision)} of every helm release in the lab (helm list -A)."""
    found = {}
    for namespace in ("kai-scheduler", "gpu-fractioning"):
        out = subprocess.run([str(lab.root / "lab" / "bin" / "helm"), "list", "-a", "-o", "json", "-n", namespace],
                             env=lab.env, capture_output=True, text=True, check=True).stdout
        for row in json.loads(out or "[]"):
            found[row["name"]] = (row["status"], row["revision"])
    return found


def lab_vars(lab):
    return yaml.safe_load((lab.state_dir / "inventory" / "group_vars" / "smshare_lab" / "lab.yml").read_text())


class _OverlayLoader(yaml.SafeLoader):
    """Reads the overlay's plain values; its vaulted login stays unread."""


_OverlayLoader.add_constructor("!vault", lambda _loader, _node: "<vaulted>")


def overlay_vars(lab):
    """The lab overlay's values (lab/smshare_lab/overlay.py)."""
    return yaml.load((Path(lab.overlay) / "group_vars" / "all.yml").read_text(), Loader=_OverlayLoader)


def site_copy(lab, folder, name):
    """inventories/<name> as a user takes it to this lab (lab/README.md, "The lab overlay"):
    copied, its hosts.yml replaced by the lab's. Returns the -i sources: the copy, then the overlay."""
    assert lab.overlay and Path(lab.overlay_hosts).is_file(), "labctl up wrote no lab overlay"
    copy = folder / name
    shutil.copytree(lab.root / "inventories" / name, copy)
    shutil.copyfile(lab.overlay_hosts, copy / "hosts.yml")
    return [str(copy), lab.overlay]


def manifest(lab):
    return json.loads((lab.state_dir / "fork_images_manifest.json").read_text())


def knob(lab, key, value=None):
    """Set (or, with None, remove) a stand-in misbehaviour knob (lab/standin/charts/CONTRACT.md)."""
    if value is None:
        lab.kubectl("-n", "smshare-lab", "patch", "configmap", "standin-knobs", "--type", "json",
                    "-p", json.dumps([{"op": "remove", "path": "/data/" + key.replace("/", "~1")}]), check=False)
    else:
        lab.kubectl("-n", "smshare-lab", "patch", "configmap", "standin-knobs", "--type", "merge",
                    "-p", json.dumps({"data": {key: value}}))


def flags_as_the_command_line_gives_them(lab, sources):
    """`-e name=value` for every boolean knob of the roles, at its default: the
    strings "true"/"false", as a user types them. Knobs the inventory (the -i
    `sources`) sets are left to it (an extra var would override the inventory)."""
    inventory = "".join(p.read_text() for d in map(Path, sources)
                        if d.is_dir() for p in sorted(d.glob("**/*")) if p.is_file())
    args = []
    for role in sorted((lab.root / "roles").iterdir()):
        spec_file = role / "meta" / "argument_specs.yml"
        if not spec_file.is_file():
            continue
        defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {}
        for entry in yaml.safe_load(spec_file.read_text())["argument_specs"].values():
            for name, option in entry.get("options", {}).items():
                if option.get("type") == "bool" and isinstance(defaults.get(name), bool) \
                        and not re.search(r"^\s*%s\s*:" % name, inventory, re.M):
                    args += ["-e", "%s=%s" % (name, str(defaults[name]).lower())]
    return args


def wait_for(what, check, timeout=240, step=3):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not after {timeout} s"
        time.sleep(step)


def node_condition(lab, node):
    obj = kube_json(lab, "get", "node", node)
    return {c["type"]: c["status"] for c in obj["status"].get("conditions", [])}.get(NODE_CONDITION)


def assert_hosts(lab, proc, **expected):
    assert proc.returncode == 0, describe(proc)
    for host in [*lab.gpu_nodes, "localhost"]:
        counts = recap(proc.stdout, host)
        for key, value in expected.items():
            assert counts[key] == value, f"{host}: {key}={counts[key]}\n{describe(proc)}"


def take_kai_off(lab):
    """Uninstall both releases with everything they leave (purge) and whatever blocks them (force)."""
    lab.playbook("playbooks/uninstall.yml", extra_vars={"uninstall_purge": True, "uninstall_force": True})
