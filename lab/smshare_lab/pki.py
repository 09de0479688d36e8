"""The lab's PKI, made with openssl: one CA, server and client certificates, kubeconfigs."""
import base64

import json
import os

from .paths import INSTANCE, KUBECONFIG, PKI, STATE, port
from .util import run

APISERVER_URL = f"https://127.0.0.1:{port(6443)}"
# 10.0.0.1: the kubernetes Service; 10.244.N.1 and 10.243.255.(N+1): the node
# tier's pod bridge and node address (node_tier.py); the podman gateway: what
# GPU-node containers dial.
APISERVER_SANS = ["IP:127.0.0.1", "IP:10.0.0.1", f"IP:10.244.{INSTANCE}.1", f"IP:10.243.255.{1 + INSTANCE}",
                  "DNS:localhost", "DNS:kubernetes", "DNS:kubernetes.default", "DNS:kubernetes.default.svc",
                  "DNS:kubernetes.default.svc.cluster.local"]


def podman_gateway():
    """The default podman network's gateway (how containers reach this machine), or None."""
    res = run(["podman", "network", "inspect", os.environ.get("SMSHARE_APT_NETWORK", "podman")],
              check=False, capture=True)
    try:
        return json.loads(res.stdout)[0]["subnets"][0]["gateway"]
    except (ValueError, LookupError, TypeError):
        return None


def apiserver_url_for_containers():
    gateway = podman_gateway()
    return f"https://{gateway}:{port(6443)}" if gateway else None


# name -> (subject, extended key usage, SANs)
CLIENTS = {
    "admin": ("/O=system:masters/CN=smshare-lab-admin", "clientAuth", None),
    "controller-manager": ("/CN=system:kube-controller-manager", "clientAuth", None),
    "scheduler": ("/CN=system:kube-scheduler", "clientAuth", None),
    "apiserver-kubelet-client": ("/O=system:masters/CN=kube-apiserver-kubelet-client", "clientAuth", None),
}


def _openssl(*args):
    run(["openssl", *args], capture=True)


def _cert(name, subject, usage, sans=None):
    key, crt = PKI / f"{name}.key", PKI / f"{name}.crt"
    if key.is_file() and crt.is_file():
        return
    csr, ext = PKI / f"{name}.csr", PKI / f"{name}.ext"
    lines = ["basicConstraints=critical,CA:FALSE",
             "keyUsage=critical,digitalSignature,keyEncipherment",
             f"extendedKeyUsage={usage}"]
    if sans:
        lines.append("subjectAltName=" + ",".join(sans))
    ext.write_text("\n".join(lines) + "\n")
    _openssl("genrsa", "-out", str(key), "2048")
    _openssl("req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr))
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(PKI / "ca.crt"), "-CAkey", str(PKI / "ca.key"),
             "-CAcreateserial", "-days", "3650", "-sha256", "-extfile", str(ext), "-out", str(crt))
    csr.unlink()
    ext.unlink()
    key.chmod(0o600)


def ensure(extra_clients=None):
    """Create what is missing; existing keys and certificates are kept."""
    PKI.mkdir(parents=True, exist_ok=True)
    PKI.chmod(0o700)
    if not (PKI / "ca.crt").is_file():
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(PKI / "ca.key"),
                 "-out", str(PKI / "ca.crt"), "-days", "3650", "-subj", "/CN=smshare-lab-ca",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature")
        (PKI / "ca.key").chmod(0o600)
    gateway = podman_gateway()
    _cert("apiserver", "/CN=kube-apiserver", "serverAuth",
          APISERVER_SANS + ([f"IP:{gateway}"] if gateway else []))
    for name, (subject, usage, sans) in {**CLIENTS, **(extra_clients or {})}.items():
        _cert(name, subject, usage, sans)
    if not (PKI / "sa.key").is_file():
        _openssl("genrsa", "-out", str(PKI / "sa.key"), "2048")
        _openssl("rsa", "-in", str(PKI / "sa.key"), "-pubout", "-out", str(PKI / "sa.pub"))
        (PKI / "sa.key").chmod(0o600)
    write_kubeconfig(KUBECONFIG, "admin")
    write_kubeconfig(STATE / "controller-manager.kubeconfig", "controller-manager")
    write_kubeconfig(STATE / "scheduler.kubeconfig", "scheduler")


def _b64(path):
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(path, client, user=None):
    """A self-contained kubeconfig (certificates embedded) for `client`."""
    user = user or client
    text = f"""apiVersion: v1
kind: Config
clusters:
- name: smshare-lab
  cluster:
    server: {APISERVER_URL}
    certificate-authority-data: {_b64(PKI / 'ca.crt')}
users:
- name: {user}
  user:
    client-certificate-data: {_b64(PKI / f'{client}.crt')}
    client-key-data: {_b64(PKI / f'{client}.key')}
contexts:
- name: smshare-lab
  context:
    cluster: smshare-lab
    user: {user}
current-context: smshare-lab
"""
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
        path.chmod(0o600)
