"""Command line of lab/labctl: up, down, status, env, build."""
import argparse
import contextlib
import fcntl
import json
import os
import shlex
import shutil
import time

from . import build as kbuild
from . import charts, control_plane, fleet, forks, gpu_nodes, inventory, pki, proc, registry, test_images
from . import instances, node_tier, overlay
from .paths import INSTANCE, KUBECONFIG, LAB_DIR, LOGS, ROOT, STATE, VAULT_PASS
from .util import LabError, die, say

FACTS = STATE / "lab.json"
LAB_BIN = STATE / "bin"
PURGED = ("pki", "etcd", "logs", "run", "bin", "registry", "forks", "node-tier", "vault-pass", "vault.sha256",
          "kubeconfig", "controller-manager.kubeconfig", "scheduler.kubeconfig", "gpu-nodes.json",
          "inventory", "overlay", "overlay-hosts.yml", "lab.json", "charts", "test-images", "apt", "instance")


def _env_flag(name):
    return os.environ.get(name, "").lower() in ("1", "true", "yes", "on")


def read_facts():
    try:
        return json.loads(FACTS.read_text())
    except (OSError, ValueError):
        return {}


def _link_tools(bins):
    LAB_BIN.mkdir(parents=True, exist_ok=True)
    for name in ("kubectl",):
        link = LAB_BIN / name
        if link.is_symlink() or link.exists():
            if os.readlink(link) == str(bins / name):
                continue
            link.unlink()
        link.symlink_to(bins / name)


def cmd_up(args):
    timings = {}
    changes = []
    t0 = time.monotonic()
    STATE.mkdir(parents=True, exist_ok=True)
    LOGS.mkdir(parents=True, exist_ok=True)
    targets = kbuild.CONTROL_PLANE + (kbuild.NODE if args.nodes else [])
    version = kbuild.source_version()
    build_log = LOGS / "build.log"
    builder = kbuild.start_background(targets, build_log)
    if builder:
        say(f"Kubernetes binaries not cached yet: building in the background (log {build_log})")

    step = time.monotonic()
    say("PKI and etcd")
    pki.ensure()
    if control_plane.start_etcd():
        changes.append("etcd")
    timings["pki+etcd"] = time.monotonic() - step

    step = time.monotonic()
    say("registry (lab/registry.sh), stand-in fork repositories, stand-in chart repository")
    if registry.available() and not registry.status()[0]:
        changes.append("registry")
    reg = registry.up()
    stand_in_forks = forks.up()
    chart_repo = charts.up()
    timings["registry+forks"] = time.monotonic() - step

    step = time.monotonic()
    say(f"GPU nodes: {args.gpu_nodes} podman containers from {gpu_nodes.IMAGE}")
    nodes, started_nodes = gpu_nodes.up(args.gpu_nodes)
    changes += started_nodes
    apt_url = gpu_nodes.standin_apt_up() if nodes else ""
    if apt_url:
        gpu_nodes.provision(nodes, apt_url)
    timings["gpu nodes"] = time.monotonic() - step

    step = time.monotonic()
    if builder:
        kbuild.follow(builder, build_log)
    bins = kbuild.build(targets, version)   # no-op when cached; raises if still missing
    timings["build (wait)"] = time.monotonic() - step

    step = time.monotonic()
    say("control plane: kube-apiserver, kube-controller-manager, kube-scheduler")
    changes += control_plane.start_kube(bins)
    _link_tools(bins)
    timings["control plane"] = time.monotonic() - step

    fleet_on = args.fleet or fleet.running(nodes)   # an earlier `up --fleet`: kept, updated
    if fleet_on:
        step = time.monotonic()
        changes += fleet.up(nodes)
        timings["fleet agents"] = time.monotonic() - step

    kube_nodes = []
    if args.nodes:
        step = time.monotonic()
        say(f"node tier: containerd + kubelet ({node_tier.NODE_NAME})")
        if not node_tier.running():
            changes.append("node tier")
        kube_nodes = node_tier.up(bins, reg or None)
        if reg:
            test_images.up(reg)
        timings["node tier"] = time.monotonic() - step
    elif node_tier.running():   # started by an earlier `up --nodes`: left as it is
        kube_nodes = [node_tier.NODE_NAME]

    inventory.write(reg, apt_url, stand_in_forks, node_tier.facts() if kube_nodes else None, chart_repo)
    node_addresses, ssh_key = gpu_nodes.addresses(nodes), gpu_nodes.ssh_key()
    generated_inventory = inventory.write_nodes(node_addresses, ssh_key)
    overlay_dir = overlay.write(overlay.values(reg, apt_url, stand_in_forks, node_tier.facts() if kube_nodes else None,
                                               chart_repo), inventory.VAULT_FILE.read_text(), node_addresses, ssh_key)
    facts = {
        "state_dir": str(STATE), "kubeconfig": str(KUBECONFIG), "apiserver": pki.APISERVER_URL,
        # The same apiserver as GPU-node containers dial it (podman gateway).
        "apiserver_for_containers": pki.apiserver_url_for_containers(),
        "bin_dir": str(bins), "kubernetes_package_version": version,
        "registry": reg, "gpu_nodes": nodes, "standin_apt_url": apt_url, "chart_repo_url": chart_repo,
        "node_tier": bool(kube_nodes), "kube_nodes": kube_nodes, "fleet": fleet_on,
        "vault_password_file": str(VAULT_PASS),
        "inventory": [str(ROOT / "inventories" / "lab"), str(generated_inventory)],
        # A copy of a shipped inventory drives the lab with these (overlay.py).
        "overlay": str(overlay_dir), "overlay_hosts": str(overlay.HOSTS),
        "instance": INSTANCE,
    }
    FACTS.write_text(json.dumps(facts, indent=2) + "\n")
    FACTS.chmod(0o600)
    timings["total"] = time.monotonic() - t0
    if changes:
        say("lab is up; started: " + ", ".join(changes))
    else:
        say("lab is up: everything was already running, nothing to do")
    for name, secs in timings.items():
        print(f"  {name:<15} {secs:6.1f}s")
    print(f"  kubeconfig      {KUBECONFIG}\n  use it with     eval \"$({LAB_DIR / 'labctl'} env)\"")
    return 0


def cmd_down(args):
    say("stopping the lab")
    node_tier.down()
    control_plane.stop_all()
    registry.down()
    gpu_nodes.down()
    inventory.remove()
    overlay.remove()
    shutil.rmtree(STATE / "etcd", ignore_errors=True)
    FACTS.unlink(missing_ok=True)
    for name in proc.tracked():   # anything else we started
        proc.stop(name)
    instances.release(STATE, INSTANCE)   # the number is free for another lab now
    if args.purge:   # only what labctl made: other tools keep their state in .lab/ too
        for name in PURGED:
            path = STATE / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
    say("lab is down")
    return 0


def status_rows():
    facts = read_facts()
    rows = []
    for name in control_plane.COMPONENTS:
        rows.append((name, control_plane.healthy(name), proc.pid_of(name) or "-", ""))
    ok, detail = registry.status()
    rows.append(("registry", ok, "-", detail))
    if facts.get("chart_repo_url"):
        ok, detail = charts.status()
        rows.append(("stand-in chart repository", ok, proc.pid_of(charts.NAME) or "-", detail))
    running = []
    for name, healthy, detail in gpu_nodes.status():
        rows.append((f"gpu node {name}", healthy, "-", detail))
        if detail == "running":
            running.append(name)
    if facts.get("fleet"):
        for name, healthy, detail in fleet.status(running):
            rows.append((name, healthy, "-", detail))
    if facts.get("standin_apt_url"):
        ok, detail = gpu_nodes.standin_apt_status()
        rows.append(("stand-in NVIDIA apt repository", ok, "-", detail))
    if facts.get("node_tier") or node_tier.anything_running():
        rows.extend(node_tier.status())
    return rows


def cmd_status(_args):
    rows = status_rows()
    print(f"{'COMPONENT':<34} {'STATE':<8} {'PID':<8} DETAIL")
    bad = False
    for name, healthy, pid, detail in rows:
        state = "n/a" if healthy is None else ("up" if healthy else "DOWN")
        bad = bad or healthy is False
        print(f"{name:<34} {state:<8} {str(pid):<8} {detail}")
    print(f"kubeconfig: {KUBECONFIG}" + ("" if KUBECONFIG.is_file() else " (absent)"))
    return 1 if bad else 0


def cmd_env(_args):
    facts = read_facts()
    if not facts:
        die("the lab is not up (no .lab/lab.json): run lab/labctl up")
    lines = {
        "KUBECONFIG": facts["kubeconfig"],
        "ANSIBLE_VAULT_PASSWORD_FILE": facts["vault_password_file"],
        "SMSHARE_LAB_INVENTORY": " ".join(f"-i {p}" for p in facts["inventory"]),
        "PATH": f"{LAB_DIR / 'bin'}:{LAB_BIN}:{os.environ.get('PATH', '')}",
        "SMSHARE_LAB_INSTANCE": str(facts.get("instance", INSTANCE)),
    }
    reg = facts.get("registry") or {}
    if reg:
        lines["SMSHARE_LAB_REGISTRY"] = reg["address"]
        lines["SMSHARE_LAB_REGISTRY_CA"] = reg["ca"]
    for key, value in lines.items():
        print(f"export {key}={shlex.quote(value)}")
    print("# then: ansible-playbook site.yml $SMSHARE_LAB_INVENTORY")
    return 0


def cmd_instance(_args):
    """The instance this state folder drives (claimed machine-wide: instances.py)."""
    print(INSTANCE)
    return 0


def cmd_load_image(args):
    if not node_tier.proc.pid_of("containerd"):
        die("the node tier is not running: lab/labctl up --nodes")
    for ref in args.images:
        node_tier.load_podman_image(ref)
        say(f"imported {ref} into the node tier's containerd (k8s.io)")
    return 0


def cmd_build(args):
    print(kbuild.build(args.targets or kbuild.ALL))
    return 0


@contextlib.contextmanager
def _exclusive():
    """One up/down at a time: several test sessions on one machine share the lab."""
    STATE.mkdir(parents=True, exist_ok=True)
    with open(STATE / "labctl.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say("another labctl up/down is running; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def main(argv):
    parser = argparse.ArgumentParser(prog="labctl", description="the smshare local lab")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", help="bring the lab up (idempotent)")
    p_up.add_argument("--nodes", action="store_true", default=_env_flag("SMSHARE_LAB_NODES"),
                      help="also run the node tier: kubelet + containerd (env SMSHARE_LAB_NODES=1)")
    p_up.add_argument("--gpu-nodes", type=int, default=int(os.environ.get("SMSHARE_LAB_GPU_NODES", "2")),
                      help="number of GPU-node containers (env SMSHARE_LAB_GPU_NODES, default 2)")
    p_up.add_argument("--fleet", action="store_true", default=_env_flag("SMSHARE_LAB_FLEET"),
                      help="make every GPU-node container a Kubernetes Node, kept by a stand-in node agent "
                           "(playbooks/driver_upgrade.yml, the GPU Operator path; env SMSHARE_LAB_FLEET=1)")
    p_down = sub.add_parser("down", help="stop everything the lab started")
    p_down.add_argument("--purge", action="store_true", help="also delete labctl's state in .lab/ (PKI, logs, registry data, vault password)")
    sub.add_parser("status", help="table of components; exit 1 when one is down")
    sub.add_parser("env", help="shell exports for kubectl/helm/ansible-playbook against the lab")
    sub.add_parser("instance", help="the lab instance (0-9) of this state folder, claimed machine-wide "
                                    "(SMSHARE_LAB_INSTANCE=auto: the first free one)")
    p_load = sub.add_parser("load-image", help="import podman images into the node tier's containerd")
    p_load.add_argument("images", nargs="+", metavar="IMAGE")
    p_build = sub.add_parser("build", help="build and cache the Kubernetes binaries")
    p_build.add_argument("targets", nargs="*", metavar="TARGET",
                         help=f"any of {', '.join(kbuild.ALL)} (default: all)")
    args = parser.parse_args(argv)
    if args.cmd == "build" and set(args.targets) - set(kbuild.ALL):
        parser.error(f"unknown build target(s): {', '.join(sorted(set(args.targets) - set(kbuild.ALL)))}")
    if args.cmd == "up" and args.gpu_nodes < 0:
        parser.error("--gpu-nodes must be 0 or more")
    if os.geteuid() != 0:
        die("the lab needs root (etcd data, iptables, containerd, podman as root)")
    handler = {"up": cmd_up, "down": cmd_down, "status": cmd_status, "env": cmd_env, "instance": cmd_instance,
               "build": cmd_build, "load-image": cmd_load_image}[args.cmd]
    try:
        if args.cmd in ("up", "down", "load-image"):
            with _exclusive():
                return handler(args)
        return handler(args)
    except LabError as exc:
        die(str(exc))
    return 1
