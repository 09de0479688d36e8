# Apache-2.0
"""Cost of re-running the nvidia_driver role on a converged node.

Converges the nvidia_driver_fresh Molecule scenario's container (an HGX node
behind the stand-in mirror), then times, interleaved, ROUNDS no-op runs of the
role (its converge playbook) and ROUNDS `ansible -m setup` on the same
container, and prints the medians and their ratio (aim: at most 3x). Prints
figures only; it never passes or fails on time.

Two transports: the podman connection (Molecule's; it cannot pipeline, so
every task costs five `podman exec`), and with --ssh also OpenSSH with
pipelining and ControlPersist, as ansible.cfg runs against real nodes and the
lab against its GPU-node containers (the node image has sshd).

    source scripts/env.sh && python3 benchmarks/driver_rerun.py [--rounds 5] [--ssh] [--keep]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCENARIO = "nvidia_driver_fresh"
HOST = "smshare-nvd-fresh-%s" % os.environ.get("SMSHARE_LAB_INSTANCE", "0")
REPO_SH = str(REPO / "lab" / "standin" / "apt" / "repo.sh")


def sh(argv, env, check=True):
    proc = subprocess.run(argv, cwd=REPO, env=env, text=True, check=False,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if check and proc.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(argv), (proc.stdout or "")[-4000:]))
    return proc.stdout or ""


def timed(argv, env):
    start = time.monotonic()
    out = sh(argv, env)
    return time.monotonic() - start, out


def inventory(tmp, connection_vars, env):
    """An inventory of the scenario's host with the scenario's variables."""
    path = Path(tmp) / ("hosts-%d.yml" % len(list(Path(tmp).iterdir())))
    path.write_text(
        "all:\n  hosts:\n    %s:\n%s  vars:\n    standin_apt_url: '%s'\n    test_mirror_url: '%s'\n"
        "    test_mirror_credentials: '%s'\n"
        % (HOST, "".join("      %s: '%s'\n" % kv for kv in connection_vars.items()), env["SMSHARE_APT_URL"],
           env["SMSHARE_APT_PRIVATE_URL"], REPO / ".lab" / "apt" / "mirror-credentials"))
    return str(path)


def enable_ssh(env, tmp):
    """sshd in the container (the node image's), root by key; returns the connection vars."""
    script = "set -e; mkdir -p /root/.ssh; chmod 700 /root/.ssh; systemctl start ssh"
    sh(["podman", "exec", HOST, "sh", "-c", script], env)
    key = Path(tmp) / "id_ed25519"
    sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], env)
    subprocess.run(["podman", "exec", "-i", HOST, "sh", "-c", "cat > /root/.ssh/authorized_keys"],
                   input=Path(str(key) + ".pub").read_text(), text=True, check=True, env=env)
    address = sh(["podman", "inspect", "-f", "{{.NetworkSettings.IPAddress}}", HOST], env).strip()
    return {"ansible_host": address, "ansible_user": "root", "ansible_connection": "ssh",
            "ansible_ssh_private_key_file": str(key), "ansible_python_interpreter": "/usr/bin/python3",
            "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"}


def measure(label, hosts, rounds, env):
    role_run = ["ansible-playbook", "-i", hosts, str(REPO / "molecule" / SCENARIO / "converge.yml")]
    setup_run = ["ansible", "-i", hosts, HOST, "-m", "ansible.builtin.setup"]
    first = timed(role_run, env)[1]  # warm-up, and proof the node is converged
    if "changed=0" not in first:
        sys.exit("the node is not converged; the role run changed something:\n" + first[-3000:])
    role_times, setup_times = [], []
    for _round in range(rounds):
        seconds, out = timed(role_run, env)
        if "changed=0" not in out:
            sys.exit("a re-run changed something:\n" + out[-3000:])
        role_times.append(seconds)
        setup_times.append(timed(setup_run, env)[0])
    role, setup = statistics.median(role_times), statistics.median(setup_times)
    tasks = first.count("\nok: [") + first.count("\nchanged: [")
    print("[%s] no-op nvidia_driver run : median %.2f s  (%s); %d tasks ran on the node"
          % (label, role, ", ".join("%.2f" % t for t in role_times), tasks))
    print("[%s] ansible -m setup        : median %.2f s  (%s)" % (label, setup, ", ".join("%.2f" % t for t in setup_times)))
    print("[%s] ratio role/setup        : %.2fx  (aim: <= 3x)" % (label, role / setup))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ssh", action="store_true", help="also measure over OpenSSH with pipelining")
    parser.add_argument("--keep", action="store_true", help="leave the container up")
    args = parser.parse_args()

    env = dict(os.environ, ANSIBLE_FORCE_COLOR="false", NO_COLOR="1",
               ANSIBLE_ROLES_PATH=str(REPO / "roles"), ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    env["PATH"] = "%s:%s" % (REPO / ".venv" / "bin", env.get("PATH", ""))
    env.setdefault("CONTAINERS_CONF", str(REPO / "molecule" / "containers.conf"))
    sh([str(REPO / "lab" / "node-image.sh")], env)
    sh([str(REPO / "lab" / "standin" / "pci" / "make-tree.py"), "hgx-a100-8gpu"], env)
    env["SMSHARE_APT_URL"] = sh([REPO_SH, "hold", str(os.getpid())], env).strip().splitlines()[-1]
    env["SMSHARE_APT_PRIVATE_URL"] = sh([REPO_SH, "private-url"], env).strip()
    try:
        for step in ("create", "prepare", "converge"):
            sh(["molecule", step, "-s", SCENARIO], env)
        with tempfile.TemporaryDirectory() as tmp:
            podman = inventory(tmp, {"ansible_connection": "containers.podman.podman",
                                     "ansible_python_interpreter": "/usr/bin/python3"}, env)
            measure("podman", podman, args.rounds, env)
            if args.ssh:
                measure("ssh+pipelining", inventory(tmp, enable_ssh(env, tmp), env), args.rounds, env)
    finally:
        if not args.keep:
            sh(["molecule", "destroy", "-s", SCENARIO], env, check=False)
        sh([REPO_SH, "release", str(os.getpid())], env, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
