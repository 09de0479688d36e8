#!/usr/bin/env bash
# Every test, stage by stage, with the time each took. `scripts/test.sh STAGE...`
# runs only those stages. Stops at the first failing stage.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. scripts/env.sh

stage_lint() {
  ansible-lint --profile production --offline
}

stage_sanity() {
  bash scripts/sanity.sh
}

stage_unit() {
  pytest -q tests/unit
}

stage_integration() {
  # tests/gpu: the real-GPU check's own paths that need no GPU (missing tools, dry runs).
  pytest -q tests/integration tests/gpu
}

# Build the release artifact, install it into an empty collections path and run
# a playbook from it by FQCN: proves what users install, not the source tree.
# SMSHARE_RELEASE_TARBALL=path checks that tarball instead of building one
# (`make release` checks the tarball it is about to publish).
stage_release() {
  local tmp tarball=${SMSHARE_RELEASE_TARBALL:-}; tmp=$(mktemp -d)
  if [ -z "$tarball" ]; then
    ansible-galaxy collection build --force --output-path "$tmp/dist" . || { rm -rf "$tmp"; return 1; }
    tarball=$(echo "$tmp"/dist/smshare-kai-*.tar.gz)
  fi
  ANSIBLE_COLLECTIONS_PATH="$tmp/collections" \
    ansible-galaxy collection install --offline --no-deps -p "$tmp/collections" "$tarball" &&
  bash scripts/release_smoke.sh "$tmp"
  local rc=$?
  rm -rf "$tmp"
  return $rc
}

stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(lint sanity unit integration release)
declare -A took
total_start=$SECONDS
for s in "${stages[@]}"; do
  printf '\n===== stage: %s =====\n' "$s"
  start=$SECONDS
  "stage_$s"; rc=$?
  took[$s]=$((SECONDS - start))
  if [ $rc -ne 0 ]; then
    printf '\nstage %s FAILED (rc=%s) after %ss\n' "$s" "$rc" "${took[$s]}"
    exit $rc
  fi
done
printf '\n===== stage times =====\n'
for s in "${stages[@]}"; do printf '%-12s %5ss\n' "$s" "${took[$s]}"; done
printf '%-12s %5ss\n' total "$((SECONDS - total_start))"
