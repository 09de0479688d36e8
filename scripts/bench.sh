#!/usr/bin/env bash
# Every benchmark, one after the other. They print figures; none passes or fails
# on time. Not part of `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
for b in driver_rerun images_rerun lab_start cluster_rerun fleet_rollout; do
  printf '\n===== benchmark: %s =====\n' "$b"
  python3 "benchmarks/$b.py"
done
printf '\n===== benchmark: %s =====\n' fleet_scale
python3 benchmarks/fleet_scale.py --settings
