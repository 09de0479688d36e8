"""The node tier (opt-in): kubelet + Debian containerd + runc + CNI bridge/host-local.

Everything it creates is the lab instance's own (paths.INSTANCE): containerd on
its own socket and root, kubelet with its own root dir, ports and cgroup root,
bridge `smshare-cni<N>`, pods in 10.244.<N>.0/24 without masquerading (no CNI
iptables chains; kubelet makes no iptables chains either), so several instances
can run side by side. `down` removes all of it: processes (by PID file, then
shims and pod processes found through our socket and cgroups), mounts under our
dirs and our network namespaces, our cgroups, the bridge, the one nat chain and
the dirs.

What a GPU node of a real cluster has, the node is given too (cluster_objects):
containerd pulls from the lab registry over TLS (hosts.toml with the lab CA,
credentials from each pod's pull secret); the `nvidia` RuntimeClass, whose
containerd handler is the stand-in runtime wrapper; the GPU labels and
`nvidia.com/gpu` capacity; in-cluster API access (the kubernetes Service
10.0.0.1:443 DNATed to this instance's apiserver, the lab has no kube-proxy);
and a stand-in NRI socket (containerd 1.6 has no NRI). Paths the stand-in
daemons mount from "the host" live under HOST_ROOT, one per instance.
"""
import hashlib
import io
import json
import os
import shutil
import tarfile
import time
from pathlib import Path

import ssl
import sys
import urllib.request

from . import pki, proc
from .paths import INSTANCE, KUBECONFIG, LAB_DIR, NAME, PKI, STATE, port
from .util import LabError, run, say, wait_for

NODE_NAME = "smshare-lab-node-01"
LIB = Path(f"/var/lib/{NAME}")
RUNDIR = Path(f"/run/{NAME}")
CONF = STATE / "node-tier"
SOCKET = RUNDIR / "containerd" / "containerd.sock"
BRIDGE = f"smshare-cni{INSTANCE}"
# kubelet refuses a loopback node IP; a port-less bridge with an unrouted address
# keeps the kubelet local while the apiserver reaches it for logs and exec.
NODE_LINK = f"smshare-node{INSTANCE}"
NODE_IP = f"10.243.255.{1 + INSTANCE}"
POD_SUBNET = f"10.244.{INSTANCE}.0/24"
# The kubelet's pod cgroups live under this root in every hierarchy.
CGROUP_ROOT = f"/{NAME}"
KUBELET_PORT = port(10250)
KUBELET_HEALTHZ_PORT = port(10248)
PAUSE_IMAGE = "localhost/smshare-lab/pause:3.4"
# A tiny image for test pods (sh, sleep, cat, ls, env, true from this host).
TOOLS_IMAGE = "localhost/smshare-lab/tools:1"
TOOLS = ("sh", "sleep", "cat", "ls", "env", "true")
BEFORE = CONF / "before.json"
# What the stand-in daemons (mpsd, fractiond) mount as host paths: the stand-in
# operator puts every hostPath under this folder (knob lab.hostRoot), so two
# instances never share /run/nvidia-mps or an NRI socket.
HOST_ROOT = LIB / "host"
NRI_SOCKET = "/var/run/nri/nri.sock"          # containerd's default, under HOST_ROOT
CRI_SOCKET_DEFAULT = "/run/containerd/containerd.sock"
RUNTIME = LAB_DIR / "standin" / "runtime" / "nvidia-container-runtime"
RUNTIME_LAUNCHER = CONF / "nvidia-container-runtime"
RUNTIME_LOG = LIB / "nvidia-runtime.log"
INJECT_DIR = HOST_ROOT / "run" / "nvidia-standin" / "inject"
CERTS_D = CONF / "certs.d"
# The kubernetes Service, DNATed to this instance's apiserver for pods.
SERVICE_IP = "10.0.0.1"
NAT_CHAIN = f"SMSHARE-LAB{INSTANCE}-SVC"
POD_GATEWAY = f"10.244.{INSTANCE}.1"
NODE_GPUS = int(os.environ.get("SMSHARE_LAB_NODE_GPUS", "8"))
NODE_LABELS = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.deploy.client": "true",
               "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": str(NODE_GPUS),
               "nvidia.com/gpu.memory": "81920"}   # GPU_PRODUCT, GPU_MEMORY_MIB below
# The simulated GPUs (lab/standin/charts/CONTRACT.md, "The GPU data plane"): what
# NVML would report, written under HOST_ROOT for the runtime wrapper (the driver's view).
GPU_PRODUCT = "NVIDIA A100-SXM4-80GB"
GPU_MEMORY_MIB = 81920
GPU_SM_COUNT = 108
GPU_TABLE = HOST_ROOT / "etc" / "nvidia-standin" / "gpus.json"
STANDIN_STATE = HOST_ROOT / "run" / "nvidia-standin" / "containers"
MPS_PIPE = HOST_ROOT / "run" / "nvidia-mps"
MPS_CONTROL = LAB_DIR / "standin" / "bin" / "nvidia-cuda-mps-control"
KNOBS_NAMESPACE = "smshare-lab"
KNOBS = "standin-knobs"
# containerd and kubelet run in a mount namespace of this instance's own (private
# propagation, pinned at MNT_NS), where /var/log/pods and /var/log/containers are
# this instance's folders: kubelet 1.20 cannot move them, and every kubelet
# deletes the pod log folders of pods it does not know, other instances' included.
NS_DIR = RUNDIR / "ns"
MNT_NS = NS_DIR / "mnt"
LOG_DIRS = {"/var/log/pods": LIB / "pod-logs", "/var/log/containers": LIB / "container-logs"}
KUBELET_CLIENT = {f"kubelet-{NODE_NAME}": (f"/O=system:nodes/CN=system:node:{NODE_NAME}", "clientAuth", None),
                  "kubelet-serving": (f"/O=system:nodes/CN=system:node:{NODE_NAME}", "serverAuth",
                                      ["IP:127.0.0.1", f"DNS:{NODE_NAME}"])}


def _write(path, text):
    """Write text when it differs; True when the file changed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
        return True
    return False


def _containerd_config(registry):
    registry_section = f"""
  [plugins."io.containerd.grpc.v1.cri".registry]
    # hosts.toml per registry (the lab registry with the lab CA); credentials
    # come from each pod's imagePullSecrets.
    config_path = "{CERTS_D}"
""" if registry else ""
    return f"""version = 2
root = "{LIB / 'containerd'}"
state = "{RUNDIR / 'containerd'}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{SOCKET}"
[ttrpc]
  address = "{SOCKET}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{LIB / 'containerd-opt'}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # The VM withholds CAP_SYS_RESOURCE: never lower a container's oom_score_adj below ours.
  restrict_oom_score_adj = true
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        Root = "{RUNDIR / 'runc'}"
        SystemdCgroup = false
    # The `nvidia` RuntimeClass's handler: the stand-in runtime wrapper, as the
    # NVIDIA container toolkit registers nvidia-container-runtime.
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
        BinaryName = "{RUNTIME_LAUNCHER}"
        Root = "{RUNDIR / 'runc'}"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{CONF / 'net.d'}"
{registry_section}
# NRI as containerd 2.x configures it. containerd 1.6 ignores this section (it
# has no NRI); the lab serves a stand-in NRI socket at this path, under HOST_ROOT.
[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = "{HOST_ROOT}{NRI_SOCKET}"
"""


def _hosts_toml(registry):
    """containerd's registry host config: the lab registry over TLS with the lab CA."""
    address = registry["address"]
    return f"""# Generated by lab/labctl up: pull from the lab registry over TLS.
server = "https://{address}"

[host."https://{address}"]
  capabilities = ["pull", "resolve"]
  ca = "{registry['ca']}"
"""


def gpu_uuid(index):
    """A stable UUID per simulated GPU of this node, in NVML's form."""
    digest = hashlib.sha256(f"{NODE_NAME}/{index}".encode()).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def gpu_table():
    return {"node": NODE_NAME, "gpus": [
        {"index": i, "uuid": gpu_uuid(i), "name": GPU_PRODUCT, "memory_mib": GPU_MEMORY_MIB,
         "sm_count": GPU_SM_COUNT} for i in range(NODE_GPUS)]}


def _runtime_launcher():
    return f"""#!/bin/sh
# Generated by lab/labctl up: the nvidia runtime handler with this instance's paths.
export NVIDIA_STANDIN_RUNTIME_LOG={RUNTIME_LOG} NVIDIA_STANDIN_INJECT_DIR={INJECT_DIR}
export NVIDIA_STANDIN_APISERVER={pki.APISERVER_URL} NVIDIA_STANDIN_CA={PKI / 'ca.crt'}
export NVIDIA_STANDIN_CERT={PKI / 'admin.crt'} NVIDIA_STANDIN_KEY={PKI / 'admin.key'}
export NVIDIA_STANDIN_GPUS={GPU_TABLE} NVIDIA_STANDIN_STATE={STANDIN_STATE}
export NVIDIA_STANDIN_MPS_PIPE={MPS_PIPE} NVIDIA_STANDIN_MPS_CONTROL={MPS_CONTROL}
exec {RUNTIME} "$@"
"""


def _cni_config():
    return json.dumps({
        "cniVersion": "0.4.0", "name": "smshare-lab",
        "plugins": [{"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False,
                     "hairpinMode": True,
                     "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_SUBNET}]],
                              "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(LIB / "cni")}}]},
        indent=2) + "\n"


def _kubelet_config():
    return f"""apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {NODE_IP}
port: {KUBELET_PORT}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {KUBELET_HEALTHZ_PORT}
# Own cgroup root and no iptables chains: another lab instance's kubelet can
# run beside this one, and `down` has nothing shared to clean.
cgroupRoot: {CGROUP_ROOT}
makeIPTablesUtilChains: false
tlsCertFile: {PKI / 'kubelet-serving.crt'}
tlsPrivateKeyFile: {PKI / 'kubelet-serving.key'}
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
  x509: {{clientCAFile: {PKI / 'ca.crt'}}}
authorization: {{mode: Webhook}}
cgroupDriver: cgroupfs
failSwapOn: false
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
serializeImagePulls: false
# Read a pod's pull secrets from the API when it starts, not through the watch cache: on a
# loaded 2-core machine the cache's sync timed out ("failed to sync secret cache") and the
# kubelet pulled without credentials (a 401 the smoke test rightly reports as a failure).
configMapAndSecretChangeDetectionStrategy: Get
# Report status often: `up` waits for the node to turn Ready.
nodeStatusUpdateFrequency: 2s
# Images are imported, never pulled: keep them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {{memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}}
"""


def _ctr(*args, check=True):
    return run(["ctr", "--address", str(SOCKET), "-n", "k8s.io", *args], check=check, capture=True)


def _docker_archive(dest, tag, files, config):
    """A docker-archive tar with one layer. files: {path in image: bytes | ("link", target)}."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        dirs = {str(parent) for p in files for parent in Path(p).parents} - {"."}
        for dirname in sorted(dirs):
            info = tarfile.TarInfo(dirname)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            tar.addfile(info)
        for path, data in sorted(files.items()):
            info = tarfile.TarInfo(path)
            info.mtime = 0
            if isinstance(data, tuple):
                info.type, info.linkname = tarfile.SYMTYPE, data[1]
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), 0o755
                tar.addfile(info, io.BytesIO(data))
    layer_bytes = layer.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer_bytes).hexdigest()
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": config,
                         "rootfs": {"type": "layers", "diff_ids": [diff_id]}, "history": []}).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [tag], "Layers": ["layer.tar"]}]).encode()
    with tarfile.open(dest, "w") as tar:
        for name, data in (("layer.tar", layer_bytes), (config_name, config), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    return dest


def _pause_archive(pause_bin):
    """The pause image (no registry, no builder)."""
    return _docker_archive(CONF / "pause.tar", PAUSE_IMAGE, {"pause": Path(pause_bin).read_bytes()},
                           {"Entrypoint": ["/pause"], "User": "65535:65535"})


def _tools_archive():
    """A few-MB image for test pods: the host's dash, sleep, cat, ls, env, true and their libraries."""
    files = {}
    for name in TOOLS:
        real = Path(shutil.which(name)).resolve()
        files[f"bin/{name}"] = real.read_bytes()
        for line in run(["ldd", str(real)], capture=True).stdout.splitlines():
            words = line.split()
            lib = words[2] if len(words) > 2 and words[1] == "=>" else words[0]
            if lib.startswith("/"):
                files[lib.lstrip("/")] = Path(lib).resolve().read_bytes()
    files["etc/debian_version"] = Path("/etc/debian_version").read_bytes()
    files["tmp/.keep"] = b""
    return _docker_archive(CONF / "tools.tar", TOOLS_IMAGE, files,
                           {"Cmd": ["/bin/sh"], "Env": ["PATH=/bin"]})


def import_archive(archive):
    """Import a docker/OCI archive into the node tier's containerd (namespace k8s.io)."""
    _ctr("images", "import", str(archive))


def forget_images(*parts):
    """Remove the node tier's cached images whose reference holds one of `parts` (a kept lab's
    earlier builds, pushed again under the same tags); returns the references removed."""
    refs = [ref for ref in _ctr("images", "ls", "-q").stdout.split() if any(part in ref for part in parts)]
    if refs:
        _ctr("images", "rm", *refs, check=False)
    return refs


def load_podman_image(ref):
    """podman save (docker-archive) + ctr import: a local image for pods."""
    archive = CONF / "podman-image.tar"
    archive.unlink(missing_ok=True)
    run(["podman", "save", "--format", "docker-archive", "-o", str(archive), ref], capture=True)
    try:
        import_archive(archive)
    finally:
        archive.unlink(missing_ok=True)


def _netns():
    return sorted(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else []


def _record_before():
    if BEFORE.is_file():
        return
    BEFORE.parent.mkdir(parents=True, exist_ok=True)
    BEFORE.write_text(json.dumps({
        "netns": _netns(),
        "paths": {p: os.path.exists(p) for p in ("/var/log/pods", "/var/log/containers", "/run/containerd")},
    }))


def node_ready(bins):
    res = run([str(bins / "kubectl"), "--kubeconfig", str(KUBECONFIG), "get", "node", NODE_NAME, "-o", "json"],
              check=False, capture=True)
    if res.returncode != 0:
        return False
    conds = json.loads(res.stdout).get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


def up(bins, registry=None):
    """Start containerd and kubelet (whatever is not running); wait for the node to be
    Ready; then give it what a GPU node has (cluster_objects). `registry`: the lab
    registry's info (address, ca) or None."""
    _record_before()
    pki.ensure(extra_clients=KUBELET_CLIENT)
    pki.write_kubeconfig(CONF / "kubelet.kubeconfig", f"kubelet-{NODE_NAME}", f"system:node:{NODE_NAME}")
    config_changed = _write(CONF / "containerd.toml", _containerd_config(registry))
    if registry:
        _write(CERTS_D / registry["address"] / "hosts.toml", _hosts_toml(registry))
    if _write(RUNTIME_LAUNCHER, _runtime_launcher()) or not os.access(RUNTIME_LAUNCHER, os.X_OK):
        RUNTIME_LAUNCHER.chmod(0o755)
    _write(CONF / "net.d" / "10-smshare-lab.conflist", _cni_config())
    _write(CONF / "kubelet.yaml", _kubelet_config())
    _mount_ns_up()
    outside = [n for n in ("kubelet", "containerd") if proc.pid_of(n) and not _in_mount_ns(proc.pid_of(n))]
    if outside:
        say(f"{' and '.join(outside)} run outside the node tier's mount namespace: restarting them in it")
        proc.stop("kubelet")
        proc.stop("containerd")
    if config_changed and proc.pid_of("containerd"):
        say("containerd's configuration changed: restarting it (running containers stay)")
        proc.stop("containerd")
    for path in (LIB, RUNDIR):
        path.mkdir(parents=True, exist_ok=True)
    for base in _our_cgroups(create=True):
        base.mkdir(exist_ok=True)
    if not _link_exists(NODE_LINK):
        run(["ip", "link", "add", NODE_LINK, "type", "bridge"], capture=True)   # no dummy module here
        run(["ip", "addr", "add", f"{NODE_IP}/32", "dev", NODE_LINK], capture=True)
        run(["ip", "link", "set", NODE_LINK, "up"], capture=True)
    if not proc.pid_of("containerd"):
        if SOCKET.exists():
            SOCKET.unlink()
        proc.start("containerd", [*_ns_prefix(), "/usr/bin/containerd", "--config", CONF / "containerd.toml"],
                   exe="/usr/bin/containerd")
        wait_for(lambda: _ctr("version", check=False).returncode == 0, 30,
                 "containerd (see .lab/logs/containerd.log)")
    images = _ctr("images", "ls", "-q").stdout.split()
    if PAUSE_IMAGE not in images:
        import_archive(_pause_archive(bins / "pause"))
    if TOOLS_IMAGE not in images:
        import_archive(_tools_archive())
    if not proc.pid_of("kubelet"):
        proc.start("kubelet", [*_ns_prefix(), bins / "kubelet", f"--config={CONF / 'kubelet.yaml'}",
                               f"--kubeconfig={CONF / 'kubelet.kubeconfig'}",
                               "--container-runtime=remote", f"--container-runtime-endpoint=unix://{SOCKET}",
                               f"--root-dir={LIB / 'kubelet'}", f"--node-ip={NODE_IP}",
                               f"--hostname-override={NODE_NAME}", f"--pod-infra-container-image={PAUSE_IMAGE}",
                               "--node-labels=smshare.io/lab-node=true", "--v=1"], exe=str(bins / "kubelet"))
    try:
        wait_for(lambda: node_ready(bins) or not proc.pid_of("kubelet"), 120, f"node {NODE_NAME} Ready", 1)
    except LabError as exc:
        raise LabError(f"{exc}; kubelet log:\n{proc.log_tail('kubelet')}") from None
    if not proc.pid_of("kubelet"):
        raise LabError("kubelet died while starting:\n" + proc.log_tail("kubelet"))
    _host_root_up()
    _service_dnat_up()
    cluster_objects(bins)
    return [NODE_NAME]


# ---- the node tier's mount namespace ------------------------------------------

def _host_mounts():
    return {line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()}


def _ns_prefix():
    return ["nsenter", f"--mount={MNT_NS}", "--"]


def _in_ns(*argv):
    return run([*_ns_prefix(), *map(str, argv)], capture=True)


def _in_mount_ns(pid):
    try:
        return os.stat(f"/proc/{pid}/ns/mnt").st_ino == os.stat(MNT_NS).st_ino
    except OSError:
        return False


def _mount_ns_up():
    """Create (once) the pinned mount namespace and its own pod log folders."""
    if str(MNT_NS) in _host_mounts():
        return
    NS_DIR.mkdir(parents=True, exist_ok=True)
    if str(NS_DIR) not in _host_mounts():
        # A namespace can only be pinned on a private mount.
        run(["mount", "--bind", str(NS_DIR), str(NS_DIR)], capture=True)
        run(["mount", "--make-private", str(NS_DIR)], capture=True)
    MNT_NS.touch()
    run(["unshare", f"--mount={MNT_NS}", "--propagation", "private", "true"], capture=True)
    for inside, backing in LOG_DIRS.items():
        backing.mkdir(parents=True, exist_ok=True)
        Path(inside).mkdir(parents=True, exist_ok=True)
        _in_ns("mount", "--bind", backing, inside)


# ---- what a GPU node of a real cluster has ----------------------------------

def _host_root_up():
    """HOST_ROOT: the stand-in daemons' "host" paths: /var/run -> /run, the CRI
    socket at containerd's default path and at the lab's real path (bind mounts of
    our socket), and the stand-in NRI socket."""
    (HOST_ROOT / "run").mkdir(parents=True, exist_ok=True)
    var_run = HOST_ROOT / "var" / "run"
    if not var_run.is_symlink():
        var_run.parent.mkdir(parents=True, exist_ok=True)
        var_run.symlink_to("../run")
    for inside in (CRI_SOCKET_DEFAULT, str(SOCKET)):
        target = Path(f"{HOST_ROOT}{inside}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch()
        # In the node tier's mount namespace, where the pods' host paths come from;
        # again after a containerd restart (a new socket).
        _in_ns("sh", "-c", 'test "$(stat -c %i "$1")" = "$(stat -c %i "$2")" && exit 0; '
                           'umount "$2" 2>/dev/null; mount --bind "$1" "$2"', "bind", SOCKET, target)
    INJECT_DIR.mkdir(parents=True, exist_ok=True)
    STANDIN_STATE.mkdir(parents=True, exist_ok=True)
    _write(GPU_TABLE, json.dumps(gpu_table(), indent=1) + "\n")
    nri = Path(f"{HOST_ROOT}/run/nri/nri.sock")
    if not proc.pid_of("nri-socket") or not nri.is_socket():
        proc.stop("nri-socket")
        proc.start("nri-socket", [sys.executable, LAB_DIR / "standin" / "runtime" / "nri-socket", nri])
        wait_for(nri.is_socket, 10, f"the stand-in NRI socket {nri}")


def _iptables(*args, check=True):
    return run(["iptables", "-w", "-t", "nat", *args], check=check, capture=True)


def _service_dnat_up():
    """Pods of this instance reach the kubernetes Service (10.0.0.1:443) at the apiserver."""
    jump = ["PREROUTING", "-s", POD_SUBNET, "-d", f"{SERVICE_IP}/32", "-p", "tcp", "--dport", "443",
            "-j", NAT_CHAIN]
    if _iptables("-L", NAT_CHAIN, "-n", check=False).returncode != 0:
        _iptables("-N", NAT_CHAIN)
    rule = ["-p", "tcp", "-j", "DNAT", "--to-destination", f"{POD_GATEWAY}:{port(6443)}"]
    if _iptables("-C", NAT_CHAIN, *rule, check=False).returncode != 0:
        _iptables("-F", NAT_CHAIN)
        _iptables("-A", NAT_CHAIN, *rule)
    if _iptables("-C", *jump, check=False).returncode != 0:
        _iptables("-A", *jump)


def _service_dnat_down():
    jump = ["PREROUTING", "-s", POD_SUBNET, "-d", f"{SERVICE_IP}/32", "-p", "tcp", "--dport", "443",
            "-j", NAT_CHAIN]
    while _iptables("-C", *jump, check=False).returncode == 0:
        _iptables("-D", *jump, check=False)
    if _iptables("-L", NAT_CHAIN, "-n", check=False).returncode == 0:
        _iptables("-F", NAT_CHAIN, check=False)
        _iptables("-X", NAT_CHAIN, check=False)


def _api(method, path, body=None, content_type="application/json"):
    """The apiserver as the lab admin (for what kubectl 1.20 cannot do: node status)."""
    ctx = ssl.create_default_context(cafile=str(PKI / "ca.crt"))
    ctx.load_cert_chain(str(PKI / "admin.crt"), str(PKI / "admin.key"))
    request = urllib.request.Request(pki.APISERVER_URL + path, method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": content_type})
    with urllib.request.urlopen(request, context=ctx, timeout=10) as resp:
        return json.loads(resp.read() or b"{}")


def _kubectl(bins, *args, input_text=None, check=True):
    return run([str(bins / "kubectl"), "--kubeconfig", str(KUBECONFIG), *args], check=check, capture=True,
               input_text=input_text)


def cluster_objects(bins):
    """The node's GPU labels and capacity, the nvidia RuntimeClass, and the stand-ins'
    knobs (ConfigMap smshare-lab/standin-knobs, readable by every ServiceAccount).
    Idempotent; knobs a test set are kept."""
    _kubectl(bins, "label", "node", NODE_NAME, "--overwrite", *[f"{k}={v}" for k, v in NODE_LABELS.items()])
    quantity = str(NODE_GPUS)
    status = _api("GET", f"/api/v1/nodes/{NODE_NAME}")["status"]
    if status.get("capacity", {}).get("nvidia.com/gpu") != quantity \
            or status.get("allocatable", {}).get("nvidia.com/gpu") != quantity:
        _api("PATCH", f"/api/v1/nodes/{NODE_NAME}/status",
             {"status": {"capacity": {"nvidia.com/gpu": quantity}, "allocatable": {"nvidia.com/gpu": quantity}}},
             "application/merge-patch+json")
    manifest = f"""apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata:
  name: nvidia
handler: nvidia
---
apiVersion: v1
kind: Namespace
metadata:
  name: {KNOBS_NAMESPACE}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: standin-knobs-reader
  namespace: {KNOBS_NAMESPACE}
rules:
- apiGroups: [""]
  resources: ["configmaps"]
  resourceNames: ["{KNOBS}"]
  verbs: ["get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: standin-knobs-reader
  namespace: {KNOBS_NAMESPACE}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: standin-knobs-reader
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: system:serviceaccounts
"""
    _kubectl(bins, "apply", "-f", "-", input_text=manifest)
    if _kubectl(bins, "-n", KNOBS_NAMESPACE, "get", "configmap", KNOBS, check=False).returncode != 0:
        _kubectl(bins, "-n", KNOBS_NAMESPACE, "create", "configmap", KNOBS)
    _kubectl(bins, "-n", KNOBS_NAMESPACE, "patch", "configmap", KNOBS, "--type", "merge",
             "-p", json.dumps({"data": {"lab.hostRoot": str(HOST_ROOT)}}))


def facts():
    """What roles and tests need to know about the node (generated inventory)."""
    return {"node": NODE_NAME, "host_root": str(HOST_ROOT), "cri_socket": str(SOCKET),
            "nri_socket": NRI_SOCKET, "containerd_config": str(CONF / "containerd.toml"),
            "runtime_log": str(RUNTIME_LOG), "gpus": NODE_GPUS, "gpu_product": GPU_PRODUCT,
            "gpu_sm_count": GPU_SM_COUNT, "gpu_memory_mib": GPU_MEMORY_MIB,
            "gpu_uuids": [gpu_uuid(i) for i in range(NODE_GPUS)]}


def running():
    return bool(proc.pid_of("kubelet") and proc.pid_of("containerd"))


def anything_running():
    return bool(proc.pid_of("kubelet") or proc.pid_of("containerd") or _link_exists(BRIDGE)
                or _link_exists(NODE_LINK))


def _link_exists(name):
    return os.path.exists(f"/sys/class/net/{name}")


def status():
    rows = []
    for name in ("containerd", "kubelet"):
        rows.append((f"node tier {name}", bool(proc.pid_of(name)), proc.pid_of(name) or "-", ""))
    rows.append(("node tier NRI socket (stand-in)", bool(proc.pid_of("nri-socket")), proc.pid_of("nri-socket") or "-",
                 f"{HOST_ROOT}{NRI_SOCKET}"))
    return rows


# ---- cleanup ---------------------------------------------------------------

def _our_mounts():
    """Mount points under our dirs or in our network namespaces, deepest first."""
    before_ns = set(_before().get("netns", []))
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        ours = point.startswith((str(LIB) + "/", str(RUNDIR) + "/")) or point in (str(LIB), str(RUNDIR))
        if point.startswith("/run/netns/cni-") and os.path.basename(point) not in before_ns:
            ours = True
        if ours:
            points.append(point)
    return sorted(set(points), key=lambda p: p.count("/"), reverse=True)


def _before():
    try:
        return json.loads(BEFORE.read_text())
    except (OSError, ValueError):
        return {}


def _cgroup_roots():
    roots = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _sep, right = line.partition(" - ")
        if right.split()[:1] and right.split()[0] in ("cgroup", "cgroup2"):
            roots.append(left.split()[4])
    return roots


def _our_cgroups(create=False):
    """This instance's cgroup root in every writable hierarchy (existing ones
    unless create)."""
    found = []
    for root in _cgroup_roots():
        base = Path(root) / CGROUP_ROOT.lstrip("/")
        if base.is_dir() or (create and os.access(root, os.W_OK)):
            found.append(base)
    return found


def other_node_tiers():
    """PIDs of kubelets of other lab instances (their root dirs are not ours)."""
    ours = f"--root-dir={LIB / 'kubelet'}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"/kubelet") and any(a.startswith(b"--root-dir=/var/lib/smshare-lab")
                                                          for a in argv) and ours not in argv:
            pids.append(int(entry))
    return pids


def _stray_pids():
    """Shims started by our containerd and processes left in kubepods cgroups."""
    pids = set()
    needle = str(SOCKET).encode()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if needle in Path(f"/proc/{entry}/cmdline").read_bytes():
                    pids.add(int(entry))
            except OSError:
                pass
    for base in _our_cgroups():
        for procs in base.rglob("cgroup.procs"):
            try:
                pids.update(int(p) for p in procs.read_text().split())
            except (OSError, ValueError):
                pass
    pids.discard(os.getpid())
    return pids


def down():
    """Stop and remove everything the node tier made. Safe to run when nothing runs."""
    _service_dnat_down()
    proc.stop("nri-socket")
    if not (BEFORE.is_file() or anything_running() or LIB.exists() or RUNDIR.exists()):
        return
    proc.stop("kubelet")
    if proc.pid_of("containerd"):
        for line in _ctr("tasks", "ls", check=False).stdout.splitlines()[1:]:
            task = line.split()[0]
            _ctr("tasks", "kill", "-s", "SIGKILL", task, check=False)
        time.sleep(0.5)
        for line in _ctr("tasks", "ls", check=False).stdout.splitlines()[1:]:
            _ctr("tasks", "rm", "-f", line.split()[0], check=False)
        for cid in _ctr("containers", "ls", "-q", check=False).stdout.split():
            _ctr("containers", "rm", cid, check=False)
    proc.stop("containerd")
    for _attempt in range(3):
        pids = _stray_pids()
        if not pids:
            break
        for pid in pids:
            proc.kill_pid(pid, timeout=2)
    for point in _our_mounts():
        if run(["umount", point], check=False, capture=True).returncode != 0:
            run(["umount", "-l", point], check=False, capture=True)
    before_ns = set(_before().get("netns", []))
    for name in _netns():
        if name.startswith("cni-") and name not in before_ns:
            try:
                os.unlink(f"/run/netns/{name}")
            except OSError:
                pass
    for base in _our_cgroups():
        for sub in sorted((p for p in base.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            try:
                sub.rmdir()
            except OSError:
                pass
        try:
            base.rmdir()
        except OSError:
            pass
    for link in (BRIDGE, NODE_LINK):
        if _link_exists(link):
            run(["ip", "link", "delete", link], check=False, capture=True)
    run(["rm", "-rf", "--one-file-system", str(LIB), str(RUNDIR)], check=False, capture=True)
    # Shared with other instances' kubelets: removed only when none runs.
    paths = {} if other_node_tiers() else _before().get("paths", {})
    for path in ("/var/log/pods", "/var/log/containers"):
        if not paths.get(path, True) and os.path.isdir(path):
            run(["rm", "-rf", "--one-file-system", path], check=False, capture=True)
    if not paths.get("/run/containerd", True) and os.path.isdir("/run/containerd"):
        run(["rm", "-rf", "--one-file-system", "/run/containerd"], check=False, capture=True)
    BEFORE.unlink(missing_ok=True)


def leftovers():
    """What of the node tier is still there (for `status` and the tests)."""
    found = []
    found += [f"link {link}" for link in (BRIDGE, NODE_LINK) if _link_exists(link)]
    found += [f"mount {p}" for p in _our_mounts()]
    found += [f"cgroup {p}" for p in _our_cgroups()]
    found += [f"pid {p}" for p in _stray_pids()]
    found += [f"path {p}" for p in (LIB, RUNDIR) if p.exists()]
    if _iptables("-L", NAT_CHAIN, "-n", check=False).returncode == 0:
        found.append(f"iptables nat chain {NAT_CHAIN}")
    return found
