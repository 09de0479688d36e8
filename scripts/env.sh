# shellcheck shell=bash
# Sourced by every script: the environment the tests, the lab and Molecule share.
_smshare_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="$_smshare_root/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$_smshare_root/ansible.cfg"
export ANSIBLE_COLLECTIONS_PATH="$_smshare_root/.collections"
# This VM lacks CAP_SYS_RESOURCE and has hybrid cgroups: podman needs both fixes.
export CONTAINERS_CONF="$_smshare_root/molecule/containers.conf"
export LC_ALL=C.UTF-8
# Which lab instance this clone drives (lab/smshare_lab/paths.py): engineers
# sharing a machine may each put a number (0-9) in a git-ignored .lab-instance
# file; everyone else gets `auto`: the number this clone's lab already holds,
# else the first one no other lab holds (claimed by lab/labctl), so a second
# clone or a CI checkout beside a running lab never collides with it.
if [ -z "${SMSHARE_LAB_INSTANCE:-}" ] && [ -s "$_smshare_root/.lab-instance" ]; then
  SMSHARE_LAB_INSTANCE=$(tr -dc 'a-z0-9' < "$_smshare_root/.lab-instance")   # a number, or auto
fi
export SMSHARE_LAB_INSTANCE=${SMSHARE_LAB_INSTANCE:-auto}
# While the lab is up, its inventory holds vaulted registry credentials.
if [ -f "$_smshare_root/.lab/vault-pass" ]; then
  export ANSIBLE_VAULT_PASSWORD_FILE="$_smshare_root/.lab/vault-pass"
fi
