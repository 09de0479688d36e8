"""The lab inventory's registry settings: vaulted credentials that work, and a registry
that refuses a wrong password and a client without the lab's CA."""
import base64
import json
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from lab_helpers import describe

pytestmark = pytest.mark.lab


def v2(registry, username, password, cafile):
    ctx = ssl.create_default_context(cafile=cafile)
    req = urllib.request.Request(f"https://{registry.address}/v2/")
    token = base64.b64encode(f"{username}:{password}".encode()).decode()
    req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.fixture()
def registry(lab):
    if lab.registry is None:
        pytest.fail("the lab has no registry (lab/registry.sh missing?)")
    return lab.registry


def inventory_vars(lab, *names):
    argv = ["ansible", "localhost", "-m", "ansible.builtin.debug",
            "-a", "msg={{ {" + ", ".join(f"'{n}': {n}" for n in names) + "} | to_json }}"]
    for inv in lab.inventory:
        argv += ["-i", inv]
    proc = subprocess.run(argv, env=lab.env, text=True, capture_output=True, check=False, cwd=lab.root)
    return proc


def test_vault_file_is_encrypted_and_opens_with_the_lab_password(lab, registry):
    vault = lab.state_dir / "inventory" / "group_vars" / "smshare_lab" / "vault.yml"
    text = vault.read_text()
    assert text.count("!vault |") == 2 and text.count("$ANSIBLE_VAULT;1.1;AES256") == 2, text
    assert registry.password not in text
    assert f"'{registry.username}'" not in text and f": {registry.username}\n" not in text
    proc = inventory_vars(lab, "smshare_registry", "smshare_registry_username", "smshare_registry_ca_file",
                          "smshare_kubeconfig", "smshare_kai_scheduler_repo_url", "smshare_kai_scheduler_commit")
    assert proc.returncode == 0, describe(proc)
    assert f"{registry.address}/kai-fork" in proc.stdout
    assert registry.username in proc.stdout
    assert registry.ca in proc.stdout
    assert str(lab.kubeconfig) in proc.stdout
    forks = json.loads((lab.state_dir / "forks" / "forks.json").read_text())
    assert forks["kai_scheduler"]["url"] in proc.stdout       # the stand-in forks, not GitHub
    assert forks["kai_scheduler"]["commit"] in proc.stdout


def test_the_overlay_vaults_the_login_as_the_generated_inventory_does(lab, registry):
    """The lab overlay (lab/README.md) carries the same login, vaulted, under the knobs' names."""
    text = (Path(lab.overlay) / "group_vars" / "all.yml").read_text()
    assert text.count("!vault |") == 2 and "smshare_registry_password: !vault |" in text, text
    assert registry.password not in text
    assert f'"{registry.username}"' not in text and f": {registry.username}\n" not in text


def without_vault_password(lab, var):
    env = dict(lab.env)
    env.pop("ANSIBLE_VAULT_PASSWORD_FILE")
    argv = ["ansible", "localhost", "-m", "ansible.builtin.debug", "-a", f"var={var}"]
    for source in lab.inventory:
        argv += ["-i", source]
    return subprocess.run(argv, env=env, text=True, capture_output=True, check=False, cwd=lab.root)


def test_credentials_need_the_vault_password(lab, registry):
    proc = without_vault_password(lab, "smshare_registry_password")
    assert proc.returncode != 0 or "no vault secrets" in proc.stdout + proc.stderr, describe(proc)
    assert "vault" in (proc.stdout + proc.stderr).lower()
    assert registry.password not in proc.stdout + proc.stderr


def test_registry_accepts_the_vaulted_credentials(registry):
    assert v2(registry, registry.username, registry.password, registry.ca) == 200


def test_registry_refuses_a_wrong_password(registry):
    assert v2(registry, registry.username, registry.password + "x", registry.ca) == 401


def test_registry_refuses_a_client_without_the_ca(registry):
    with pytest.raises(urllib.error.URLError) as err:
        v2(registry, registry.username, registry.password, None)
    assert isinstance(err.value.reason, ssl.SSLCertVerificationError)
