"""The converge of an air-gapped site, on the lab: every download location set
as inventories/airgap sets it (README.md, "Air-gapped sites"), each pointing
at a mirror the lab serves (the stand-in CUDA repository, the forks' bare
git repositories, the lab registry for base and builder images, binfmt and
the charts' images, a local cuda-keyring .deb), and nothing may reach out.

How "nothing reaches out" is proven: the whole converge runs under
`strace -f` tracing connect/sendto/sendmsg, which follows every process the
run starts (ansible, git, helm, skopeo, podman, and through podman exec the
processes inside the GPU-node containers: apt, get_url). Every IPv4/IPv6
destination in the trace must be the lab's: loopback, the podman network
(GPU nodes, stand-in apt server), the node tier's pod subnet. A DNS query
(to the machine's resolver) or any other address fails the test and is
named. Why not a network namespace: the lab's API server, registry and
stand-in repository listen on this machine's loopback and podman gateway,
which a fresh namespace cannot reach. Why not a recording proxy: only
proxy-aware HTTP clients would go through it (not DNS, apt inside the
nodes, git or skopeo), so it could not show that nothing else reached out.

The nodes' own apt sources are the site's business (its distribution
mirror): the lab's GPU-node image lists deb.debian.org beside the lab's
stand-in subset, so the module sets that entry aside while it runs (the
first trace of this test caught apt on the nodes resolving and connecting
to deb.debian.org).

Two runs after the directory's converge (conftest.py): site.yml again, from
fresh fork clones and chart copies with cuda-keyring purged from the nodes
(clone, keyring, apt, charts, helm, smoke test images), and the images play
at a tag of its own (base images pulled from the mirror, builds, pushes,
registry lookups), which leaves the installed releases alone.
"""
import ipaddress
import json
import re
import subprocess
import time
import urllib.request

import pytest

from lab_helpers import describe, recap

pytestmark = [pytest.mark.lab, pytest.mark.lab_nodes, pytest.mark.slow]

BASE_IMAGES = ["golang:1.26.3-bookworm", "nvcr.io/nvidia/distroless/go:v3.2.1"]
INET = re.compile(r'sin6?_addr=inet_(?:addr\("([^"]+)"\)|pton\(AF_INET6, "([^"]+)"(?:, &sin6_addr)?\))')
PORT = re.compile(r"sin6?_port=htons\((\d+)\)")


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


def traced(lab, tmp_path, name, playbook, extra_vars):
    trace = tmp_path / (name + ".trace")
    argv = ["strace", "-f", "-qq", "--seccomp-bpf", "-e", "trace=connect,sendto,sendmsg", "-e", "signal=none",
            "-o", str(trace), "ansible-playbook", playbook]
    for inventory in lab.inventory:
        argv += ["-i", inventory]
    argv += ["-e", "@" + str(write_json(tmp_path / (name + ".vars.json"), extra_vars))]
    started = time.monotonic()
    proc = subprocess.run(argv, env=lab.env, cwd=lab.root, capture_output=True, text=True, check=False)
    print(f"\n[airgap] {name}: {time.monotonic() - started:.0f} s under strace")
    return proc, trace.read_text()


def write_json(path, data):
    path.write_text(json.dumps(data))
    return path


def push_base_image(lab, tmp_path, target):
    """An image in the lab registry standing in for a mirror's copy of a public base image."""
    store = ["buildah", "--root", str(tmp_path / "buildah"), "--runroot", str(tmp_path / "buildah-run"),
             "--storage-driver", "vfs"]
    ctr = subprocess.run(store + ["from", "scratch"], capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run(store + ["config", "--label", "smshare.airgap.mirror-of=" + target, ctr], check=True)
    subprocess.run(store + ["commit", "-q", ctr, "localhost/airgap-base:1"], capture_output=True, check=True)
    reg = lab.registry
    ref = "%s/mirror/%s" % (reg.address, target if "/" in target.split(":")[0] else "docker.io/library/" + target)
    subprocess.run(store + ["push", "--cert-dir", str(reg.cert_dir), "--creds", f"{reg.username}:{reg.password}",
                            "localhost/airgap-base:1", "docker://" + ref], capture_output=True, check=True)
    subprocess.run(store + ["rm", ctr], capture_output=True, check=False)
    return ref


@pytest.fixture(scope="module")
def mirrors(lab, kai_install, tmp_path_factory):
    """The lab as an air-gapped site's mirrors, and the overrides inventories/airgap makes."""
    tmp = tmp_path_factory.mktemp("airgap")
    keyring = tmp / "cuda-keyring_1.1-1_all.deb"
    with urllib.request.urlopen(lab.standin_apt_url.rstrip("/") + "/debian12/x86_64/" + keyring.name) as answer:
        keyring.write_bytes(answer.read())
    base = [{"name": name, "mirror": push_base_image(lab, tmp, name)} for name in BASE_IMAGES]
    state = lab.state_dir
    overrides = {
        "nvidia_driver_keyring_deb": str(keyring),
        "fork_images_workdir": str(tmp / "kai-forks"),
        "kai_scheduler_chart_cache_dir": str(tmp / "charts"),
        "gpu_fractioning_chart_cache_dir": str(tmp / "charts"),
        "fork_images_base_images": base,
        "fork_images_binfmt_image": lab.registry.address + "/mirror/docker.io/tonistiigi/binfmt:latest",
        # The smoke test's images are part of what must come from the mirrors: test every node.
        "smshare_site_smoke_test": "always",
        # The lab's build environment (inventories/lab) plus a Go proxy on this machine.
        "fork_images_build_environment": {
            "REGISTRY_AUTH_FILE": str(state / "fork-images" / "auth.json"),
            "STANDIN_BUILDAH_ROOT": str(state / "fork-images" / "buildah"),
            "STANDIN_CERT_DIR": str(lab.registry.cert_dir),
            "STANDIN_MAKE_RECORD": str(state / "fork-images" / "make-record.jsonl"),
            "GOPROXY": "http://127.0.0.1:1/goproxy", "GOSUMDB": "off"},
    }
    # An air-gapped node's own apt sources are the site's distribution mirror (the lab's
    # stand-in subset): the lab image's deb.debian.org entry is set aside meanwhile.
    for node in lab.gpu_nodes:
        on_node(node, "sed", "-i", "s|^deb http://deb.debian.org|#airgap-test# deb http://deb.debian.org|",
                "/etc/apt/sources.list")
    yield {"tmp": tmp, "overrides": overrides, "nets": lab_nets(lab)}
    for node in lab.gpu_nodes:
        on_node(node, "sed", "-i", "s|^#airgap-test# ||", "/etc/apt/sources.list")


def on_node(node, *argv):
    proc = subprocess.run(["podman", "exec", node, *argv], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_the_converge_reaches_nothing_outside_the_mirrors(lab, mirrors):
    # Everything the converge would otherwise find in place: the nodes' keyring, the
    # fork clones and the chart copies (fresh folders above).
    for node in lab.gpu_nodes:
        on_node(node, "dpkg", "--purge", "cuda-keyring")
    proc, trace = traced(lab, mirrors["tmp"], "site", "site.yml", mirrors["overrides"])
    assert proc.returncode == 0, describe(proc)
    for node in lab.gpu_nodes:
        assert recap(proc.stdout, node)["failed"] == 0
        assert "cuda-keyring" in subprocess.run(["podman", "exec", node, "dpkg-query", "-W", "cuda-keyring"],
                                                capture_output=True, text=True, check=False).stdout
    assert (mirrors["tmp"] / "kai-forks" / "KAI-Scheduler" / ".git").is_dir()
    found = destinations(trace)
    counts = {}
    for address, port in found:
        counts[f"{address}:{port}"] = counts.get(f"{address}:{port}", 0) + 1
    print("[airgap] site.yml destinations: " + ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())))
    assert found, "the trace recorded no connection at all: strace did not follow the run"
    assert outside(found, mirrors["nets"]) == [], describe(proc)
    # The stand-in CUDA repository (the mirror) was used by apt on the nodes.
    apt_port = int(lab.standin_apt_url.rsplit(":", 1)[1].split("/")[0])
    assert any(port == apt_port for _address, port in found), counts


def test_the_images_build_pulls_its_base_images_from_the_mirror(lab, mirrors):
    calls = lab.state_dir / "forks" / "docker" / "calls.log"
    before = calls.read_text() if calls.is_file() else ""
    extra = dict(mirrors["overrides"], fork_images_tag="airgap-test",
                 fork_images_manifest_path=str(mirrors["tmp"] / "manifest.json"))
    proc, trace = traced(lab, mirrors["tmp"], "images", "playbooks/images.yml", extra)
    assert proc.returncode == 0, describe(proc)
    new_calls = calls.read_text()[len(before):]
    for item in mirrors["overrides"]["fork_images_base_images"]:
        assert f"pull {item['mirror']}" in new_calls, new_calls
        assert f"tag {item['mirror']} {item['name']}" in new_calls, new_calls
    found = destinations(trace)
    assert found and outside(found, mirrors["nets"]) == [], describe(proc)
    registry_port = int(lab.registry.address.rsplit(":", 1)[1])
    assert any(port == registry_port for _address, port in found)
    manifest = json.loads((mirrors["tmp"] / "manifest.json").read_text())
    assert manifest["tag"] == "airgap-test" and manifest["images"]
    # Again: every name already holds its mirror's image, so nothing is pulled anew or tagged.
    proc = lab.playbook("tests/integration/cluster/playbooks/airgap_base_images.yml", extra_vars=extra)
    assert proc.returncode == 0, describe(proc)
    assert recap(proc.stdout)["changed"] == 0, describe(proc)


def test_the_trace_check_can_fail(lab, mirrors):
    """An attempt to reach an outside address (TEST-NET-1, from inside a GPU node) is named."""
    trace = mirrors["tmp"] / "probe.trace"
    probe = "import socket\ntry:\n socket.create_connection(('192.0.2.1', 443), timeout=1)\nexcept OSError:\n pass\n"
    subprocess.run(["strace", "-f", "-qq", "-e", "trace=connect,sendto,sendmsg", "-o", str(trace),
                    "podman", "exec", lab.gpu_nodes[0], "python3", "-c", probe],
                   capture_output=True, text=True, check=False)
    assert outside(destinations(trace.read_text()), mirrors["nets"]) == [("192.0.2.1", 443)], trace.read_text()
