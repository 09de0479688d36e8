"""The lab's fleet (`labctl up --fleet`): every GPU-node container is a Kubernetes Node.

Inside each container a STAND-IN node agent (lab/standin/node_agent, a kubelet
simulator in the manner of KWOK) registers the Node under the container's name,
keeps its Lease and Ready condition, reports the stand-in driver installed in
that container and runs the pods bound to it as simulated pods. It is a systemd
service of the container: it stops when the container stops (the Node goes
NotReady) and starts again with it (a "reboot": the lab's reboot command restarts
the container, see inventories/lab/group_vars/all.yml).

Each agent has its own client certificate (CN=system:node:<name>, O=system:nodes:
the API server's Node authorizer gives it what a kubelet gets) and dials the API
server at the podman gateway (pki.apiserver_url_for_containers).

Fleet nodes carry the taint nvidia.com/gpu=present:NoSchedule, as GPU pools
commonly do (the GPU Operator's DaemonSets tolerate it): pods that do not ask
for a GPU node keep landing on the node tier, where containers really run.

Opt-in: a lab without --fleet keeps its GPU-node containers as hosts only, so
the cluster's GPU Nodes are the node tier's, where the smoke test's pods really
run; the fleet's tests get a lab of their own (scripts/test.sh fleet-tests).
"""
import hashlib
import io
import json
import subprocess
import tarfile
import time

from . import gpu_nodes, pki
from .paths import INSTANCE, LAB_DIR, PKI
from .util import LabError, say

AGENT_DIR = LAB_DIR / "standin" / "node_agent"
AGENT = AGENT_DIR / "node_agent.py"
UNIT = AGENT_DIR / "smshare-node-agent.service"
CONFIG_DIR = "/etc/smshare-node-agent"
SERVICE = "smshare-node-agent.service"
TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
# What the GPU Operator's node labelling would have set on a GPU node of a
# cluster where it runs (the fractioning DaemonSets select deploy.client).
REGISTRATION_LABELS = {"nvidia.com/gpu.deploy.client": "true",
                       "smshare.kai/lab-fleet": "true"}


def _cert_name(node):
    return f"node-{node}"


def _files(node, index, apiserver):
    """{path in the container: (bytes, mode)} for one node."""
    name = _cert_name(node)
    config = {
        "node_name": node, "apiserver": apiserver,
        "ca_file": f"{CONFIG_DIR}/ca.crt", "cert_file": f"{CONFIG_DIR}/node.crt",
        "key_file": f"{CONFIG_DIR}/node.key",
        "registration_labels": REGISTRATION_LABELS, "register_with_taints": [TAINT],
        "pod_ip_prefix": f"10.245.{INSTANCE * 25 + index}",
    }
    return {
        "/usr/local/sbin/smshare-node-agent": (AGENT.read_bytes(), 0o755),
        f"/etc/systemd/system/{SERVICE}": (UNIT.read_bytes(), 0o644),
        f"{CONFIG_DIR}/config.json": (json.dumps(config, indent=1).encode() + b"\n", 0o600),
        f"{CONFIG_DIR}/ca.crt": ((PKI / "ca.crt").read_bytes(), 0o644),
        f"{CONFIG_DIR}/node.crt": ((PKI / f"{name}.crt").read_bytes(), 0o644),
        f"{CONFIG_DIR}/node.key": ((PKI / f"{name}.key").read_bytes(), 0o600),
    }


def _tar(files):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        dirs = sorted({p.rsplit("/", 1)[0] for p in files})
        for folder in dirs:
            info = tarfile.TarInfo(folder.lstrip("/"))
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, int(time.time())
            tar.addfile(info)
        for path, (data, mode) in sorted(files.items()):
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _digest(files):
    digest = hashlib.sha256()
    for path, (data, mode) in sorted(files.items()):
        digest.update(f"{path}:{mode}:".encode() + data)
    return digest.hexdigest()[:16]


def up(nodes):
    """Install (or update) and start the node agent in each GPU-node container."""
    if not nodes:
        return []
    apiserver = pki.apiserver_url_for_containers()
    if not apiserver:
        raise LabError("no podman gateway: the GPU-node containers cannot reach the API server")
    pki.ensure({_cert_name(n): (f"/O=system:nodes/CN=system:node:{n}", "clientAuth", None) for n in nodes})
    changed = []
    for index, node in enumerate(nodes, start=1):
        files = _files(node, index, apiserver)
        digest = _digest(files)
        stamp = gpu_nodes.podman("exec", node, "cat", f"{CONFIG_DIR}/.installed", check=False).stdout.strip()
        active = gpu_nodes.podman("exec", node, "systemctl", "is-active", SERVICE, check=False).stdout.strip()
        if stamp == digest and active == "active":
            continue
        _copy(node, files)
        gpu_nodes.podman("exec", "-i", node, "sh", "-c", f"cat > {CONFIG_DIR}/.installed", input_text=digest)
        gpu_nodes.podman("exec", node, "systemctl", "daemon-reload")
        gpu_nodes.podman("exec", node, "systemctl", "enable", SERVICE, check=False)
        gpu_nodes.podman("exec", node, "systemctl", "restart", SERVICE)
        changed.append(f"node agent {node}")
    if changed:
        say(f"fleet: node agents started in {len(changed)} GPU-node container(s)")
    return changed


def _copy(node, files):
    """Unpack the files into the container (one `podman exec`, a tar on stdin)."""
    res = subprocess.run(["podman", "exec", "-i", node, "tar", "-x", "-C", "/", "--no-same-owner"],
                         input=_tar(files), env=gpu_nodes.podman_env(), capture_output=True, check=False)
    if res.returncode != 0:
        raise LabError(f"could not install the node agent in {node}: {res.stderr.decode(errors='replace')}")


def running(nodes):
    """Does a node agent run in any of these GPU-node containers?"""
    return any(gpu_nodes.podman("exec", n, "systemctl", "is-active", SERVICE, check=False).stdout.strip() == "active"
               for n in nodes)


def status(nodes):
    """[(name, healthy, detail)] of the agents in the running GPU-node containers."""
    rows = []
    for node in nodes:
        res = gpu_nodes.podman("exec", node, "systemctl", "is-active", SERVICE, check=False)
        state = res.stdout.strip() or "not running"
        rows.append((f"node agent {node}", state == "active", state))
    return rows
