#!/usr/bin/env bash
# Every benchmark, one after the other. They print figures; none passes or fails
# on time. Not part of `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
# This clone's lab number, claimed once (the Molecule hosts and the lab are named by it).
SMSHARE_LAB_INSTANCE=$(lab/labctl instance)
export SMSHARE_LAB_INSTANCE
# Mitogen, pinned, for fleet_scale's settings (beside .venv, not in it).
if [ ! -d .cache/bench-mitogen/ansible_mitogen ]; then
  .venv/bin/pip install -q --disable-pip-version-check --target .cache/bench-mitogen -r requirements/bench.txt
fi
export SMSHARE_BENCH_MITOGEN=$PWD/.cache/bench-mitogen
for b in driver_rerun images_rerun lab_start cluster_rerun fleet_rollout lint_throughput; do
  printf '\n===== benchmark: %s =====\n' "$b"
  python3 "benchmarks/$b.py"
done
printf '\n===== benchmark: %s =====\n' fleet_scale
python3 benchmarks/fleet_scale.py --settings
printf '\n===== benchmark: %s =====\n' "fleet_scale --node-side"
python3 benchmarks/fleet_scale.py --node-side --counts 1,8,16 --settings
