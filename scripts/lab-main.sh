#!/usr/bin/env bash
# The main job on the local lab: bring the lab up with its node tier (the
# charts' pods run there; idempotent), then converge site.yml on it exactly as
# a platform team would on a real cluster: preflight, driver, images, both
# releases installed and checked.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh

t0=$SECONDS
lab/labctl up --nodes "$@"
t_lab=$((SECONDS - t0))
eval "$(lab/labctl env)"

t1=$SECONDS
# shellcheck disable=SC2086 # SMSHARE_LAB_INVENTORY holds several -i options
ansible-playbook site.yml ${SMSHARE_LAB_INVENTORY:--i inventories/lab}
t_play=$((SECONDS - t1))

printf '\n===== lab main job =====\n'
lab/labctl status || true
printf 'lab up       %5ss\nsite.yml     %5ss\ntotal        %5ss\n' "$t_lab" "$t_play" "$((SECONDS - t0))"
printf 'Kubeconfig: %s\n' "${KUBECONFIG:-?}"
