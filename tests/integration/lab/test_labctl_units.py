"""labctl's pieces that need no running lab (fast, no root needed)."""
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "lab"))

# the names only: importing must not claim a lab instance (instances.py) for this process
_claim = os.environ.get("SMSHARE_LAB_NO_CLAIM")
os.environ["SMSHARE_LAB_NO_CLAIM"] = "1"
from smshare_lab import build, inventory, node_tier  # noqa: E402
if _claim is None:
    del os.environ["SMSHARE_LAB_NO_CLAIM"]


@pytest.mark.parametrize("name, text, found", [
    ("debian.sources", "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\n", False),
    ("debian.sources", "Types: deb deb-src\nURIs: http://x/debian\nSuites: bookworm bookworm-updates\n"
                       "Components: main contrib\n", True),
    ("debian.sources", "Types: deb-src\nURIs: http://x/debian\nSuites: bookworm\nComponents: main\n"
                       "Enabled: no\n", False),
    ("x.list", "deb-src http://deb.debian.org/debian bookworm main\n", True),
    ("x.list", "# deb-src http://deb.debian.org/debian bookworm main\n", False),
    ("x.list", "deb-src http://deb.debian.org/debian trixie main\n", False),
])
def test_deb_src_detection(tmp_path, name, text, found):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / name).write_text(text)
    assert build._has_deb_src(tmp_path) is found


def test_pause_archive_is_a_docker_archive_with_the_binary(tmp_path, monkeypatch):
    monkeypatch.setattr(node_tier, "CONF", tmp_path)
    binary = tmp_path / "pause-bin"
    binary.write_bytes(b"\x7fELF-not-really")
    archive = node_tier._pause_archive(binary)
    with tarfile.open(archive) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
        assert manifest[0]["RepoTags"] == [node_tier.PAUSE_IMAGE]
        config = json.load(tar.extractfile(manifest[0]["Config"]))
        assert config["config"]["Entrypoint"] == ["/pause"]
        layer = tarfile.open(fileobj=tar.extractfile("layer.tar"))
        member = layer.getmember("pause")
        assert member.mode == 0o755 and layer.extractfile(member).read() == binary.read_bytes()


def test_generated_inventory_vars_and_vault(tmp_path, monkeypatch):
    monkeypatch.setattr(inventory, "STATE", tmp_path / "state")
    monkeypatch.setattr(inventory, "VAULT_PASS", tmp_path / "state" / "vault-pass")
    monkeypatch.setattr(inventory, "VAULT_STAMP", tmp_path / "state" / "vault.sha256")
    monkeypatch.setattr(inventory, "GENERATED", tmp_path / "gv")
    monkeypatch.setattr(inventory, "HOSTS", tmp_path / "hosts.yml")
    monkeypatch.setattr(inventory, "LAB_VARS", tmp_path / "gv" / "lab.yml")
    monkeypatch.setattr(inventory, "VAULT_FILE", tmp_path / "gv" / "vault.yml")
    reg = {"address": "127.0.0.1:5443", "ca": "/x/ca.crt", "username": "u", "password": "s3cret-'quote"}
    inventory.write(reg, "http://10.88.0.1:18615", {"kai_scheduler": {"url": "file:///k.git", "pr_ref": "p",
                                                                      "commit": "c" * 40}})
    plain = (tmp_path / "gv" / "lab.yml").read_text()
    assert "smshare_lab_registry_address: '127.0.0.1:5443'" in plain
    assert "smshare_lab_standin_apt_url: 'http://10.88.0.1:18615'" in plain
    vault = (tmp_path / "gv" / "vault.yml").read_text()
    assert "s3cret" not in vault and vault.count("!vault |") == 2
    first = vault
    inventory.write(reg, "http://10.88.0.1:18615")      # same secrets: the vault file is left alone
    assert (tmp_path / "gv" / "vault.yml").read_text() == first
    view = subprocess.run(["ansible", "localhost", "-i", "localhost,", "-c", "local", "-m", "ansible.builtin.debug",
                           "-a", "var=vault_smshare_registry_password", "-e", f"@{tmp_path / 'gv' / 'vault.yml'}",
                           "--vault-password-file", str(tmp_path / "state" / "vault-pass")],
                          text=True, capture_output=True, check=False)
    assert view.returncode == 0, view.stderr
    assert "s3cret-'quote" in view.stdout
    inventory.write_nodes({"smshare-lab3-gpu-02": "10.88.0.12", "smshare-lab3-gpu-01": "10.88.0.11"},
                          tmp_path / "state" / "ssh" / "id_ed25519")
    gpu_nodes = yaml.safe_load((tmp_path / "hosts.yml").read_text())["all"]["children"]["gpu_nodes"]
    assert gpu_nodes["hosts"] == {"smshare-lab3-gpu-01": {"ansible_host": "10.88.0.11"},
                                  "smshare-lab3-gpu-02": {"ansible_host": "10.88.0.12"}}
    assert gpu_nodes["vars"] == {"ansible_ssh_private_key_file": str(tmp_path / "state" / "ssh" / "id_ed25519"),
                                 "ansible_control_path_dir": str(tmp_path / "state" / "ssh" / "cp")}


def test_instance_names_and_ports(monkeypatch):
    """Instance N: ports moved by 100 x N, names with N; instance 0 keeps the plain ones."""
    script = ("from smshare_lab import paths, control_plane, node_tier, gpu_nodes, pki; "
              "print(paths.NAME, control_plane.ETCD_PORT, control_plane.PORTS['kube-apiserver'], "
              "pki.APISERVER_URL, node_tier.LIB, node_tier.BRIDGE, node_tier.POD_SUBNET, "
              "node_tier.CGROUP_ROOT, gpu_nodes.NAME_PREFIX, gpu_nodes.INSTANCE_LABEL)")
    lab_dir = str(Path(__file__).resolve().parents[3] / "lab")

    def names(instance):
        env = {"PATH": "/usr/bin:/bin", "SMSHARE_LAB_INSTANCE": instance, "SMSHARE_LAB_NO_CLAIM": "1"}
        return subprocess.run([sys.executable, "-c", script], cwd=lab_dir, env=env, text=True,
                              capture_output=True, check=True).stdout.split()

    assert names("0") == ["smshare-lab", "2379", "6443", "https://127.0.0.1:6443", "/var/lib/smshare-lab",
                          "smshare-cni0", "10.244.0.0/24", "/smshare-lab", "smshare-lab-gpu-",
                          "io.smshare.lab.instance=0"]
    assert names("3") == ["smshare-lab3", "2679", "6743", "https://127.0.0.1:6743", "/var/lib/smshare-lab3",
                          "smshare-cni3", "10.244.3.0/24", "/smshare-lab3", "smshare-lab3-gpu-",
                          "io.smshare.lab.instance=3"]
    bad = subprocess.run([sys.executable, "-c", "import smshare_lab.paths"], cwd=lab_dir, text=True, check=False,
                         capture_output=True, env={"PATH": "/usr/bin:/bin", "SMSHARE_LAB_INSTANCE": "12"})
    assert bad.returncode != 0 and "0 to 9" in bad.stderr


def test_instances_are_claimed_machine_wide(tmp_path, monkeypatch):
    """Two labs never hold one instance: a number held by another live lab is refused naming it,
    auto takes the first free one and keeps it, a stale claim is taken over, down gives it back."""
    from smshare_lab import instances
    monkeypatch.setattr(instances, "REGISTRY", tmp_path / "registry")
    first, second, third = tmp_path / "clone-a" / ".lab", tmp_path / "clone-b" / ".lab", tmp_path / "b" / ".lab-second"
    assert instances.resolve(first, "0") == 0
    (first / "lab.json").write_text("{}")           # its lab is up
    with pytest.raises(instances.Taken) as taken:
        instances.resolve(second, "0")
    assert str(first.resolve()) in str(taken.value) and ".lab-instance" in str(taken.value)
    assert instances.resolve(second, "auto") == 1 and instances.resolve(second, "auto") == 1
    assert (second / "instance").read_text().strip() == "1"
    assert instances.resolve(first, "0") == 0      # its own claim again
    (first / "lab.json").unlink()                  # taken down without releasing; its claimer (us) runs
    with pytest.raises(instances.Taken):
        instances.resolve(third, "0")
    claim = json.loads((tmp_path / "registry" / "0.json").read_text())
    (tmp_path / "registry" / "0.json").write_text(json.dumps({**claim, "started": claim["started"] - 1}))
    assert instances.resolve(third, "0") == 0      # same pid, another start time: a reused pid, stale
    instances.release(third, 0)
    assert not (tmp_path / "registry" / "0.json").exists()
    instances.release(second, 0)                   # not its claim: nothing happens
    assert (tmp_path / "registry" / "1.json").exists()


def test_a_claim_without_a_lab_holds_only_while_its_holder_runs(tmp_path):
    """CI runs on a copy of a developer's machine: a claim a read-only `labctl` call left
    there (no lab up) refused CI's lab. A claim with no lab holds while the process that
    claimed it runs, or the test command that named itself holder (SMSHARE_LAB_HOLDER)."""
    lab_dir = Path(__file__).resolve().parents[3] / "lab"
    registry = tmp_path / "registry"

    def claim(state, number, holder=None):
        env = {"PATH": "/usr/bin:/bin", "SMSHARE_LAB_INSTANCES": str(registry), "SMSHARE_LAB_STATE": str(state),
               "SMSHARE_LAB_INSTANCE": number, **({"SMSHARE_LAB_HOLDER": str(holder)} if holder else {})}
        return subprocess.run([sys.executable, "-c", "import smshare_lab.paths as p; print(p.INSTANCE)"],
                              cwd=lab_dir, env=env, text=True, capture_output=True, check=False)

    first, second = tmp_path / "a" / ".lab", tmp_path / "b" / ".lab"
    assert claim(first, "0").returncode == 0          # a one-off call: it exits, its claim is stale
    taken_over = claim(second, "0")
    assert taken_over.returncode == 0 and taken_over.stdout.strip() == "0", taken_over.stderr
    assert json.loads((registry / "0.json").read_text())["state"] == str(second.resolve())
    assert claim(first, "3", holder=os.getpid()).returncode == 0      # held for us, who still run
    refused = claim(second, "3")
    assert refused.returncode != 0 and str(first.resolve()) in refused.stderr
    # labctl up's children (labctl build) resolve the instance again: the claim stays with the live holder
    assert claim(first, "3").returncode == 0
    assert json.loads((registry / "3.json").read_text())["pid"] == os.getpid()
    assert claim(second, "3").returncode != 0


def test_a_clone_without_lab_instance_takes_a_free_number_beside_a_running_lab(tmp_path):
    """CI's checkout ran beside a developer's lab holding 0 and stopped at "lab instance 0 is
    held". A clone with no .lab-instance says auto (scripts/env.sh): it keeps the number its own
    lab holds, else takes the first free one."""
    root = Path(__file__).resolve().parents[3]
    registry = tmp_path / "registry"
    running = tmp_path / "dev" / ".lab"
    running.mkdir(parents=True)
    (running / "lab.json").write_text("{}")                 # a lab up in another clone
    registry.mkdir()
    (registry / "0.json").write_text(json.dumps({"state": str(running.resolve()), "pid": 1, "started": None}))
    clone = tmp_path / "ci"
    (clone / "scripts").mkdir(parents=True)
    (clone / "scripts" / "env.sh").write_text((root / "scripts" / "env.sh").read_text())

    def number():
        script = (f". {clone}/scripts/env.sh && echo $SMSHARE_LAB_INSTANCE && "
                  f"cd {root / 'lab'} && {sys.executable} -c 'import smshare_lab.paths as p; print(p.INSTANCE)'")
        env = {"PATH": "/usr/bin:/bin", "SMSHARE_LAB_INSTANCES": str(registry),
               "SMSHARE_LAB_STATE": str(clone / ".lab"), "SMSHARE_LAB_HOLDER": str(os.getpid())}
        done = subprocess.run(["bash", "-c", script], env=env, text=True, capture_output=True, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert number() == ["auto", "1"]
    (clone / ".lab").mkdir(exist_ok=True)
    (clone / ".lab" / "lab.json").write_text("{}")          # its own lab came up on 1
    (running / "lab.json").unlink()                         # the other went down (0 free again)
    assert number() == ["auto", "1"]                        # it keeps its own number


def test_the_instance_registry_is_outside_every_labs_own_folders():
    """`labctl down` removes an instance's /var/lib and /run folders: the registry of every
    lab's claims must live in neither, or one lab's down would drop the others' claims."""
    from smshare_lab import instances
    registry = Path(str(instances.REGISTRY))
    for number in range(instances.COUNT):
        name = "smshare-lab" + (str(number) if number else "")
        for own in (Path("/var/lib") / name, Path("/run") / name):
            assert own != registry and own not in registry.parents, (number, own)


def test_the_scripts_labctl_runs_see_the_claimed_number_not_auto():
    """registry.sh and repo.sh compute their ports from SMSHARE_LAB_INSTANCE: "auto"
    (the test command's second lab) stopped registry.sh at "auto: unbound variable"."""
    code = ("from smshare_lab import util; "
            "print(util.run(['bash', '-c', 'echo $((5443 + 100 * SMSHARE_LAB_INSTANCE))'], capture=True).stdout)")
    env = dict(os.environ, SMSHARE_LAB_INSTANCE="auto", SMSHARE_LAB_NO_CLAIM="1")
    done = subprocess.run([sys.executable, "-c", code], cwd=str(Path(__file__).resolve().parents[3] / "lab"),
                          env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "5443"


def test_kubectl_is_debians_package_of_the_same_source_unpacked_not_installed(tmp_path, monkeypatch):
    monkeypatch.setattr(build, "CACHE", tmp_path)
    version = build.source_version()
    bins = build.build(["kubectl"], version)                   # nothing to compile: no source fetched
    out = subprocess.run([str(bins / "kubectl"), "version", "--client", "-o", "json"],
                         capture_output=True, text=True, check=True).stdout
    upstream = version.split("really")[-1].split("-")[0]      # 1.20.5+really1.20.2-1.1+deb12u1 -> 1.20.2
    assert json.loads(out)["clientVersion"]["gitVersion"] == f"v{upstream}"
    assert list(tmp_path.glob("src/*")) == []                  # neither the source nor the .deb kept


def test_a_kubectl_package_apt_does_not_have_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(build, "CACHE", tmp_path)
    with pytest.raises(build.LabError, match=r"apt-get download kubernetes-client=0\.0\.1-0 failed"):
        build._unpack_packaged("kubectl", "0.0.1-0", tmp_path / "kubectl")
    assert not (tmp_path / "kubectl").exists()
