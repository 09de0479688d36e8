"""etcd (Debian) and the Kubernetes control plane built from Debian's source."""
import socket
import ssl
import urllib.request

from . import proc
from .paths import NAME, PKI, STATE, port
from .pki import APISERVER_URL
from .util import LabError, say, wait_for

ETCD_PORT = port(2379)
ETCD_CLIENT = f"http://127.0.0.1:{ETCD_PORT}"
ETCD_PEER = f"http://127.0.0.1:{port(2380)}"
PORTS = {"kube-apiserver": port(6443), "kube-controller-manager": port(10257), "kube-scheduler": port(10259)}
COMPONENTS = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"]


def port_open(port, host="127.0.0.1"):
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def _get(url, client=None, timeout=2):
    ctx = ssl.create_default_context(cafile=str(PKI / "ca.crt"))
    if client:
        ctx.load_cert_chain(str(PKI / f"{client}.crt"), str(PKI / f"{client}.key"))
    if url.startswith(tuple(f"https://127.0.0.1:{PORTS[n]}/" for n in ("kube-controller-manager", "kube-scheduler"))):
        # controller-manager/scheduler serve self-signed certs
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except OSError:
        return None, ""


def apiserver_ready():
    return _get(APISERVER_URL + "/readyz", "admin")[0] == 200


def healthy(name):
    """Is component `name` running and answering?"""
    if not proc.pid_of(name):
        return False
    if name == "etcd":
        try:
            with urllib.request.urlopen(ETCD_CLIENT + "/health", timeout=2) as resp:
                return b'"true"' in resp.read()
        except OSError:
            return False
    if name == "kube-apiserver":
        return apiserver_ready()
    return _get(f"https://127.0.0.1:{PORTS[name]}/healthz")[0] == 200


def _refuse_foreign_port(name, port):
    if not proc.pid_of(name) and port_open(port):
        raise LabError(f"port {port} on 127.0.0.1 is taken by a process the lab did not start; "
                       f"stop it (ss -ltnp 'sport = :{port}') before `labctl up`")


def start_etcd():
    if healthy("etcd"):
        return False
    _refuse_foreign_port("etcd", ETCD_PORT)
    data = STATE / "etcd"
    data.mkdir(parents=True, exist_ok=True)
    data.chmod(0o700)
    proc.start("etcd", ["/usr/bin/etcd", f"--name={NAME}", f"--data-dir={data}",
                        f"--listen-client-urls={ETCD_CLIENT}", f"--advertise-client-urls={ETCD_CLIENT}",
                        f"--listen-peer-urls={ETCD_PEER}", f"--initial-advertise-peer-urls={ETCD_PEER}",
                        f"--initial-cluster={NAME}={ETCD_PEER}",
                        f"--listen-metrics-urls=http://127.0.0.1:{port(2381)}",
                        "--quota-backend-bytes=2147483648", "--log-level=warn"])
    wait_for(lambda: healthy("etcd"), 30, "etcd health (see .lab/logs/etcd.log)")
    return True


def _argv(name, bins):
    pki = PKI
    if name == "kube-apiserver":
        # All addresses: GPU-node containers (podman bridge) and pods (node-tier
        # bridge) reach it too; TLS client certificates and RBAC still guard it.
        return [bins / name, f"--etcd-servers={ETCD_CLIENT}", "--bind-address=0.0.0.0",
                f"--secure-port={PORTS[name]}", "--advertise-address=127.0.0.1", "--insecure-port=0",
                "--endpoint-reconciler-type=none", "--service-cluster-ip-range=10.0.0.0/24",
                f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}", f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                "--authorization-mode=Node,RBAC", "--kubelet-preferred-address-types=InternalIP",
                f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
                f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
                "--allow-privileged=true", "--profiling=false", "--v=1"]
    if name == "kube-controller-manager":
        kubeconfig = STATE / "controller-manager.kubeconfig"
        return [bins / name, f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}", "--bind-address=127.0.0.1", "--port=0",
                f"--secure-port={PORTS[name]}",
                "--leader-elect=false", "--use-service-account-credentials=true",
                f"--root-ca-file={pki / 'ca.crt'}", f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--cluster-signing-cert-file={pki / 'ca.crt'}", f"--cluster-signing-key-file={pki / 'ca.key'}",
                "--controllers=*,-nodeipam,-cloud-node-lifecycle", "--profiling=false", "--v=1"]
    if name == "kube-scheduler":
        kubeconfig = STATE / "scheduler.kubeconfig"
        return [bins / name, f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}", "--bind-address=127.0.0.1", "--port=0",
                f"--secure-port={PORTS[name]}",
                "--leader-elect=false", "--profiling=false", "--v=1"]
    raise ValueError(name)


def start_kube(bins):
    """Start apiserver, controller-manager and scheduler (whatever is not running)."""
    started = []
    for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        if healthy(name):
            continue
        if proc.pid_of(name):
            say(f"{name} runs but does not answer; restarting it")
            proc.stop(name)
        _refuse_foreign_port(name, PORTS[name])
        proc.start(name, _argv(name, bins))
        started.append(name)
        if name == "kube-apiserver":
            wait_for(lambda: healthy("kube-apiserver") or not proc.pid_of("kube-apiserver"), 90,
                     "kube-apiserver /readyz")
            if not proc.pid_of("kube-apiserver"):
                raise LabError("kube-apiserver died while starting:\n" + proc.log_tail("kube-apiserver"))
    for name in started[1:] if started[:1] == ["kube-apiserver"] else started:
        wait_for(lambda n=name: healthy(n), 60, f"{name} /healthz (see .lab/logs/{name}.log)")
    return started


def stop_all():
    for name in reversed(COMPONENTS):
        proc.stop(name)
