"""GPU nodes: podman containers from localhost/smshare-node:debian12, systemd as PID 1,
reached by Ansible over SSH as root with the lab's own key (ssh_key()), at the
address podman gave each (it keeps it across the container's restarts, so across
a reboot inside it)."""
import json
import os
import time
import urllib.request

from .paths import INSTANCE, LAB_DIR, NAME, ROOT, STATE
from .util import LabError, run, say

IMAGE = os.environ.get("SMSHARE_LAB_NODE_IMAGE", "localhost/smshare-node:debian12")
NAME_PREFIX = f"{NAME}-gpu-"
LABEL = "io.smshare.lab=gpu-node"
# Which lab instance a container belongs to (several labs can share a machine).
INSTANCE_LABEL = f"io.smshare.lab.instance={INSTANCE}"
NODE_IMAGE_SCRIPT = LAB_DIR / "node-image.sh"
# The stand-in NVIDIA apt repository (driver engineer's): served over http on the
# podman bridge gateway, so nodes stay on the default podman network.
STANDIN_APT_SCRIPT = LAB_DIR / "standin" / "apt" / "repo.sh"
PROVISION_SCRIPT = LAB_DIR / "standin" / "apt" / "provision-node.sh"
COUNT_FILE = STATE / "gpu-nodes.json"
SSH_DIR = STATE / "ssh"
SSH_KEY = SSH_DIR / "id_ed25519"
# What each lab node stands in for: an HGX A100 80GB board (8 GPUs behind 6
# NVSwitches, so Fabric Manager is needed). Its stand-in PCI tree is mounted
# where sysfs shows the bus (the modules and the stand-in Fabric Manager read
# it there); the stand-in nvidia-smi reads the GPUs from /etc/nvidia-standin/gpus.json.
PCI_LAYOUT = "hgx-a100-8gpu"
PCI_TREE = STATE / "pci" / PCI_LAYOUT
MAKE_PCI_TREE = LAB_DIR / "standin" / "pci" / "make-tree.py"


def gpu_buses():
    """The GPUs' PCI addresses in the layout (vendor 0x10de, class 0x0302xx)."""
    lines = (LAB_DIR / "standin" / "pci" / (PCI_LAYOUT + ".txt")).read_text().splitlines()
    return [f[0] for f in (line.split() for line in lines if line.strip() and not line.startswith("#"))
            if f[1] == "0x10de" and f[3].startswith("0x0302")]


def hardware(name, index):
    gpus = [{"name": "NVIDIA A100-SXM4-80GB",
             "uuid": "GPU-5f2a7c1e-3b8d-4e6f-9a%02d-c2d3e4f5a6%02d" % (index, gpu),
             "pci_bus_id": "0000" + bus.upper(),
             "memory_total_mib": 81920, "multiprocessor_count": 108, "compute_cap": "8.0"}
            for gpu, bus in enumerate(gpu_buses())]
    return {"node": name, "gpus": gpus}


def podman_env():
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(ROOT / "molecule" / "containers.conf"))
    return env


def podman(*args, check=True, capture=True, input_text=None):
    return run(["podman", *args], check=check, capture=capture, env=podman_env(), input_text=input_text)


def names(count):
    return [f"{NAME_PREFIX}{i:02d}" for i in range(1, count + 1)]


def existing():
    """{name: state} of every lab GPU-node container, running or not."""
    res = podman("ps", "-a", "--filter", f"label={LABEL}", "--filter", f"label={INSTANCE_LABEL}",
                 "--format", "json", check=False)
    if res.returncode != 0:
        return {}
    return {c["Names"][0]: c.get("State", "") for c in json.loads(res.stdout or "[]")}


def image_present():
    return podman("image", "exists", IMAGE, check=False).returncode == 0


def ensure_image():
    if NODE_IMAGE_SCRIPT.is_file():
        # Cheap when the image is current (the script compares a recipe label).
        if not image_present():
            say(f"building the node image {IMAGE} with {NODE_IMAGE_SCRIPT} (about 1 min)")
        run(["bash", str(NODE_IMAGE_SCRIPT)], env=dict(podman_env(), SMSHARE_NODE_IMAGE=IMAGE), capture=True)
        if not image_present():
            raise LabError(f"{NODE_IMAGE_SCRIPT} ran but {IMAGE} is still missing")
        return True
    say(f"SKIP GPU nodes: image {IMAGE} is missing and {NODE_IMAGE_SCRIPT} is not there yet "
        "(the driver-role engineer's script builds it)")
    return False


def ssh_key():
    """The lab's SSH key (made once per lab state folder): its private key's path."""
    if not SSH_KEY.is_file():
        SSH_DIR.mkdir(parents=True, exist_ok=True)
        SSH_DIR.chmod(0o700)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{NAME} GPU nodes", "-f", str(SSH_KEY)])
    return SSH_KEY


def addresses(node_names):
    """{name: IP address on the podman network} of running nodes."""
    found = {}
    for name in node_names:
        address = podman("inspect", "--format", "{{.NetworkSettings.IPAddress}}", name, check=False).stdout.strip()
        if not address:
            raise LabError(f"GPU node {name} has no address on the podman network; see `podman inspect {name}`")
        found[name] = address
    return found


def _systemd_up(name):
    res = podman("exec", name, "systemctl", "is-system-running", check=False)
    return res.stdout.strip() in ("running", "degraded")


def up(count):
    """Start `count` nodes (and remove surplus ones). Returns (names, what changed)."""
    if count < 0:
        raise LabError(f"GPU node count must be 0 or more, got {count}")
    wanted = names(count)
    current = existing()
    removed = []
    for name in sorted(set(current) - set(wanted)):
        say(f"removing surplus GPU node {name}")
        podman("rm", "-f", "-t", "5", name)
        removed.append(f"removed {name}")
    if count == 0:
        COUNT_FILE.parent.mkdir(parents=True, exist_ok=True)
        COUNT_FILE.write_text(json.dumps({"count": 0, "names": []}))
        return [], removed
    if not ensure_image():
        return [], removed
    run(["python3", str(MAKE_PCI_TREE), PCI_LAYOUT, str(PCI_TREE)], capture=True)
    started = []
    for name in wanted:
        state = current.get(name)
        if state == "running":
            continue
        if state:
            podman("start", name)
        else:
            # --restart=always: a reboot inside (systemd's reboot ends the container) starts
            # it again, as a machine comes back; `podman stop` still stops it for good.
            argv = ["run", "-d", "--name", name, "--hostname", name, "--label", LABEL, "--label", INSTANCE_LABEL,
                    "--systemd=always", "--stop-signal", "SIGRTMIN+3", "--stop-timeout", "10",
                    "--restart=always", "--volume", f"{PCI_TREE}:/sys/bus/pci/devices:ro"]
            podman(*argv, IMAGE, "/sbin/init")
        started.append(name)
    deadline = time.monotonic() + 90
    for name in started:
        while not _systemd_up(name):
            if time.monotonic() > deadline:
                state = podman("exec", name, "systemctl", "is-system-running", check=False).stdout
                raise LabError(f"systemd in {name} did not come up ({state.strip()}); "
                               f"see `podman logs {name}`")
            time.sleep(0.5)
    for name in started:
        podman("exec", "-i", name, "sh", "-c",
               "mkdir -p /etc/nvidia-standin && cat > /etc/nvidia-standin/gpus.json",
               input_text=json.dumps(hardware(name, wanted.index(name) + 1), indent=1))
    authorized = (ssh_key().with_suffix(".pub")).read_text()
    for name in wanted:   # every node: a lab state folder made anew has a new key
        podman("exec", "-i", name, "sh", "-c", "umask 077 && mkdir -p /root/.ssh && cat > /root/.ssh/authorized_keys",
               input_text=authorized)
    COUNT_FILE.parent.mkdir(parents=True, exist_ok=True)
    COUNT_FILE.write_text(json.dumps({"count": count, "names": wanted}))
    return wanted, removed + started


def standin_apt_up():
    """Start the stand-in NVIDIA apt repository server; its base URL, or "" when absent."""
    if not STANDIN_APT_SCRIPT.is_file():
        say(f"SKIP stand-in NVIDIA apt repository: {STANDIN_APT_SCRIPT} is not there yet")
        return ""
    return run(["bash", str(STANDIN_APT_SCRIPT), "start"], capture=True, env=podman_env()).stdout.strip()


def provision(names, apt_url):
    """Give each node what a real GPU node has (lab/standin/apt/provision-node.sh)."""
    script = PROVISION_SCRIPT.read_text()
    for name in names:
        podman("exec", "-i", name, "sh", "-s", apt_url, input_text=script)


def standin_apt_status():
    """Does the repository answer where the nodes look for it (its Release file)?"""
    if not STANDIN_APT_SCRIPT.is_file():
        return None, "lab/standin/apt/repo.sh not there yet"
    url = run(["bash", str(STANDIN_APT_SCRIPT), "url"], check=False, capture=True, env=podman_env()).stdout.strip()
    try:
        with urllib.request.urlopen(f"{url}/debian12/x86_64/Release", timeout=3) as resp:
            return resp.status == 200, url
    except (OSError, ValueError) as exc:
        return False, f"{url}: {exc}"


def down():
    for name in sorted(existing()):
        podman("rm", "-f", "-t", "10", name)
    if STANDIN_APT_SCRIPT.is_file():
        run(["bash", str(STANDIN_APT_SCRIPT), "stop"], check=False, capture=True, env=podman_env())
    COUNT_FILE.unlink(missing_ok=True)


def status():
    """[(name, healthy, detail)] for the nodes the lab is meant to run."""
    try:
        meant = json.loads(COUNT_FILE.read_text())["names"]
    except (OSError, ValueError, KeyError):
        meant = []
    current = existing()
    rows = []
    for name in sorted(set(meant) | set(current)):
        state = current.get(name, "absent")
        rows.append((name, state == "running" and name in meant, state))
    return rows


def wanted_names():
    try:
        return json.loads(COUNT_FILE.read_text())["names"]
    except (OSError, ValueError, KeyError):
        return []
