"""The lab as an air-gapped site, for the directory's one converge (conftest.py).

The converge runs as a platform engineer's would: a copy of inventories/airgap
with the lab's hosts.yml and the site's cuda-keyring .deb in its files/, and
the lab overlay (lab/README.md, "The lab overlay") as the site's values. The
overlay's smshare_mirror_registry is the lab registry's mirror/ path, so the
images the copy composes from it (base and builder images, binfmt) are the
lab's; the stand-in CUDA repository, the forks' bare git repositories and the
chart repository are the overlay's mirror URLs. The base images are pushed to
the mirror paths the copy composes before the converge.

How "nothing reaches out" is proven: the converge runs under `strace -f`
tracing connect/sendto/sendmsg, which follows every process the run starts
(ansible, git, helm, skopeo, podman, and through podman exec the processes
inside the GPU-node containers: apt, get_url; for that the copy reaches its GPU
nodes through the podman connection, not SSH as the lab's own hosts.yml does). Every IPv4/IPv6 destination in
the trace must be the lab's: loopback, the podman network (GPU nodes, stand-in
apt server), the node tier's pod subnet. Why not a network namespace: the
lab's API server, registry and stand-in repository listen on this machine's
loopback and podman gateway, which a fresh namespace cannot reach. Why not a
recording proxy: only proxy-aware HTTP clients would go through it (not DNS,
apt inside the nodes, git or skopeo), so it could not show that nothing else
reached out.

The nodes' own apt sources are the site's business (its distribution mirror):
the lab's GPU-node image lists deb.debian.org beside the lab's stand-in
subset, so that entry is set aside while the converge runs (the first trace
caught apt on the nodes resolving and connecting to deb.debian.org).
"""
import ipaddress
import json
import re
import subprocess
import time
import urllib.request

import yaml

from cluster_helpers import overlay_vars, site_copy
from lab_helpers import on_node

INET = re.compile(r'sin6?_addr=inet_(?:addr\("([^"]+)"\)|pton\(AF_INET6, "([^"]+)"(?:, &sin6_addr)?\))')
PORT = re.compile(r"sin6?_port=htons\((\d+)\)")
SET_ASIDE = "#airgap-test# "
# strace's own fatal error, not the playbook's: seen once in CI (PTRACE_LISTEN: Input/output error).
TRACER_GAVE_UP = re.compile(r"^strace: ptrace\(PTRACE_\w+,pid:\d+.*\): .*$", re.M)


class AirgapSite:
    """The user's copy of inventories/airgap, its mirrors in the lab, and what the traced converge left."""

    def __init__(self, lab, tmp):
        self.lab = lab
        self.tmp = tmp
        self.nets = lab_nets(lab)
        self.calls_log = lab.state_dir / "forks" / "docker" / "calls.log"
        self.calls_before = ""
        self.calls = ""
        self.trace = ""
        self.inventory = site_copy(lab, tmp, "airgap")
        copy = tmp / "airgap"
        # For this traced run only, the GPU nodes through the podman connection: strace -f then
        # follows the processes a task starts inside them (apt, get_url) as children of podman exec.
        # Over SSH they are children of the node's sshd, outside the trace (and a reboot restarts it).
        hosts = yaml.safe_load((copy / "hosts.yml").read_text())
        gpu_nodes = hosts["all"]["children"]["gpu_nodes"]
        gpu_nodes["vars"]["ansible_connection"] = "containers.podman.podman"
        gpu_nodes["hosts"] = dict((name, None) for name in gpu_nodes["hosts"])   # the container, not its address
        (copy / "hosts.yml").write_text(yaml.safe_dump(hosts, sort_keys=False))
        # The site's step: the cuda-keyring .deb where the copy's smshare_cuda_keyring_deb says.
        keyring = copy / "files" / "cuda-keyring_1.1-1_all.deb"
        keyring.parent.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(lab.standin_apt_url.rstrip("/") + "/debian12/x86_64/" + keyring.name) as answer:
            keyring.write_bytes(answer.read())
        # The copy's base images, composed from the overlay's mirror registry, pushed there.
        mirror = overlay_vars(lab)["smshare_mirror_registry"]
        shipped = yaml.safe_load((copy / "group_vars" / "all.yml").read_text())["smshare_fork_base_images"]
        self.base_images = [{"name": item["name"],
                             "mirror": item["mirror"].replace("{{ smshare_mirror_registry }}", mirror)}
                            for item in shipped]
        for item in self.base_images:
            push_base_image(lab, tmp, item["mirror"])
        # Not a site's value: a lab kept from an earlier session has the images in its registry,
        # and the trace must see the build pull its base images.
        self.extra_vars = {"fork_images_force_rebuild": True}

    def converge(self):
        """site.yml under strace, the nodes' distribution entry set aside meanwhile."""
        self.calls_before = self.calls_log.read_text() if self.calls_log.is_file() else ""
        for node in self.lab.gpu_nodes:
            on_node_checked(node, "dpkg", "--purge", "cuda-keyring")   # a kept lab's: installed again from the .deb
            on_node_checked(node, "sed", "-i", f"s|^deb http://deb.debian.org|{SET_ASIDE}deb http://deb.debian.org|",
                            "/etc/apt/sources.list")
        try:
            proc, self.trace = traced(self.lab, self.tmp, "site", "site.yml", self.extra_vars, self.inventory)
        finally:
            for node in self.lab.gpu_nodes:
                on_node_checked(node, "sed", "-i", f"s|^{SET_ASIDE}||", "/etc/apt/sources.list")
        self.calls = (self.calls_log.read_text() if self.calls_log.is_file() else "")[len(self.calls_before):]
        return proc


def lab_nets(lab):
    nets = [ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"),
            ipaddress.ip_network("0.0.0.0/32")]
    podman = json.loads(subprocess.run(["podman", "network", "inspect", "podman"], capture_output=True,
                                       text=True, check=True).stdout)[0]
    nets += [ipaddress.ip_network(s["subnet"]) for s in podman.get("subnets") or []]
    instance = int(lab.env["SMSHARE_LAB_INSTANCE"])   # the number this lab claimed (.lab-instance may say auto)
    nets.append(ipaddress.ip_network("10.244.%d.0/24" % instance))
    return nets


def destinations(trace_text):
    """(address, port) of every IPv4/IPv6 connect/sendto/sendmsg in an strace -f log."""
    found = []
    for line in trace_text.splitlines():
        match = INET.search(line)
        if not match:
            continue
        address = match.group(1) or match.group(2)
        port = PORT.search(line)
        found.append((address, int(port.group(1)) if port else 0))
    return found


def outside(found, nets):
    bad = []
    for address, port in found:
        ip = ipaddress.ip_address(address)
        if getattr(ip, "ipv4_mapped", None):
            ip = ip.ipv4_mapped
        if not any(ip in net for net in nets if net.version == ip.version):
            bad.append((address, port))
    return sorted(set(bad))


def traced(lab, tmp_path, name, playbook, extra_vars, inventory):
    """The playbook under strace: (its process, the trace). When strace itself gives up
    (TRACER_GAVE_UP), it kills the processes it started (the run's output stops there),
    so the first trace covers all the first run did; the run is made again, the converge
    being safe to re-run, it must pass whole, and both traces are returned to be checked."""
    vars_file = tmp_path / (name + ".vars.json")
    vars_file.write_text(json.dumps(extra_vars))
    traces = []
    for attempt in (1, 2):
        trace = tmp_path / f"{name}.{attempt}.trace"
        argv = ["strace", "-f", "-qq", "--seccomp-bpf", "-e", "trace=connect,sendto,sendmsg", "-e", "signal=none",
                "-o", str(trace), "ansible-playbook", playbook]
        for source in inventory:
            argv += ["-i", source]
        argv += ["-e", "@" + str(vars_file)]
        started = time.monotonic()
        proc = subprocess.run(argv, env=lab.env, cwd=lab.root, capture_output=True, text=True, check=False)
        print(f"\n[airgap] {name}: {time.monotonic() - started:.0f} s under strace")
        traces.append(trace.read_text() if trace.is_file() else "")
        if proc.returncode == 0 or not TRACER_GAVE_UP.search(proc.stderr):
            break
        print(f"[airgap] strace gave up ({TRACER_GAVE_UP.search(proc.stderr).group(0)}): the run again")
    return proc, "".join(traces)


def push_base_image(lab, tmp_path, ref):
    """An image in the lab registry at `ref`, standing in for a mirror's copy of a public base image."""
    store = ["buildah", "--root", str(tmp_path / "buildah"), "--runroot", str(tmp_path / "buildah-run"),
             "--storage-driver", "vfs"]
    ctr = subprocess.run(store + ["from", "scratch"], capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run(store + ["config", "--label", "smshare.airgap.mirror-of=" + ref, ctr], check=True)
    subprocess.run(store + ["commit", "-q", ctr, "localhost/airgap-base:1"], capture_output=True, check=True)
    reg = lab.registry
    assert ref.startswith(reg.address + "/"), f"{ref}: not in the lab registry {reg.address}"
    subprocess.run(store + ["push", "--cert-dir", str(reg.cert_dir), "--creds", f"{reg.username}:{reg.password}",
                            "localhost/airgap-base:1", "docker://" + ref], capture_output=True, check=True)
    subprocess.run(store + ["rm", ctr], capture_output=True, check=False)
    return ref


def on_node_checked(node, *argv):
    proc = on_node(node, *argv)
    assert proc.returncode == 0, proc.stderr
    return proc
