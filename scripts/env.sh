# shellcheck shell=bash
# Sourced by every script: the environment the tests, the lab and Molecule share.
_smshare_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="$_smshare_root/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$_smshare_root/ansible.cfg"
export ANSIBLE_COLLECTIONS_PATH="$_smshare_root/.collections"
# This VM lacks CAP_SYS_RESOURCE and has hybrid cgroups: podman needs both fixes.
export CONTAINERS_CONF="$_smshare_root/molecule/containers.conf"
export LC_ALL=C.UTF-8
# While the lab is up, its inventory holds vaulted registry credentials.
if [ -f "$_smshare_root/.lab/vault-pass" ]; then
  export ANSIBLE_VAULT_PASSWORD_FILE="$_smshare_root/.lab/vault-pass"
fi
