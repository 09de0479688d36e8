#!/usr/bin/env bash
# shellcheck disable=SC2317  # the stage_* functions are called by name: "stage_${s//-/_}"
# Every test, timed. `scripts/test.sh` runs them all as three streams at once on
# this machine: most of the stages wait (on the cluster, apt in containers, image
# builds) rather than compute, so one stream's waits are another's CPU:
#   lab stream:    the tests marked `lab` (one shared lab, brought up once)
#   other stream:  lint, sanity, unit, oldest-core, the integration tests that need no lab
#                  (Molecule, own registries, localhost)
#   second stream: on a second lab, the fleet's tests and the lab tests that
#                  need no shared converge; then release
# `scripts/test.sh STAGE...` runs only those stages, one after the other
# (stages: lint sanity unit oldest-core integration lab-tests other-tests fleet-tests
# second-lab-tests release); a failing stage stops its stream.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. scripts/env.sh

INTEGRATION=(tests/integration tests/gpu)
LOGS=build/test-logs

# ansible.cfg's inventory includes the running lab's (.lab/inventory: vaulted
# values, the vault password file in .lab/): the syntax checks must not depend
# on whether the lab stream has brought the lab up (or down) yet.
# Then the docs as the Ansible ecosystem checks them: every plugin's and role's
# documentation parses and validates, and its references resolve (`make docs`
# builds the site itself; tests/integration/release/test_docs_site.py).
stage_lint() {
  env -u ANSIBLE_VAULT_PASSWORD_FILE ANSIBLE_INVENTORY=inventories/lab ansible-lint --profile production --offline &&
  antsibull-docs lint-collection-docs --plugin-docs .
}

stage_sanity() {
  bash scripts/sanity.sh
}

stage_unit() {
  pytest -q tests/unit
}

# meta/runtime.yml's requires_ansible, tested: the collection's unit tests and the
# tests that run its modules and plays on localhost (tests/**/*_localhost.py),
# again with the oldest ansible-core it claims (.venv-oldest, scripts/bootstrap.sh;
# its collections are galaxy.yml's lower bounds). The lab's own unit tests
# (tests/unit/lab) do not use ansible-core.
stage_oldest_core() {
  local want have
  want=$(sed -n 's/^requires_ansible: *">=\(.*\)"$/\1/p' meta/runtime.yml)
  have=$(.venv-oldest/bin/python -c 'import ansible.release; print(ansible.release.__version__)') || return 1
  if [ "$have" != "$want" ]; then
    echo "oldest-core: .venv-oldest has ansible-core $have, meta/runtime.yml claims >=$want:" \
      "pin ansible-core==$want in requirements/python-oldest.txt and run make bootstrap" >&2
    return 1
  fi
  if [ ! -f .venv-oldest/lib/python3.11/site-packages/ansible_collections/kubernetes/core/MANIFEST.json ]; then
    echo "oldest-core: .venv-oldest does not reach the ansible package's collections: run make bootstrap" >&2
    return 1
  fi
  local localhost=() tmp rc; mapfile -t localhost < <(find tests -name '*_localhost.py' | sort)
  tmp=$(mktemp -d /tmp/smshare-pytest-oldest.XXXXXX)
  PATH="$PWD/.venv-oldest/bin:$PATH" pytest -q --basetemp "$tmp" \
    tests/unit/plugins tests/unit/collection "${localhost[@]}"; rc=$?
  rm -rf "$tmp"
  return "$rc"
}

# The second lab (state in .lab-second/, the first lab instance no other lab on
# this machine holds: lab/smshare_lab/instances.py), brought up and down by each
# session that uses it, runs in the second stream the tests marked `second_lab`:
# - the fleet's tests (also `lab_fleet`), which cordon, drain and reboot Nodes,
#   break the stand-in apt repository on purpose and need five GPU nodes (the
#   shared lab's tests never see that churn);
# - lab tests that need no shared converge (they leave the lab stream, the
#   longest of the three).
# Which lab and which stream a test takes is its own marker, never a path here.
on_second_lab() {
  SMSHARE_LAB_INSTANCE=auto SMSHARE_LAB_STATE="$PWD/.lab-second" "$@"
}
# Claim both instances before the streams start (the shared lab's is this
# clone's own: .lab-instance's number, refused naming the holder if another lab has it,
# else the number this clone's lab holds or the first free one).
# Stages that need no lab (lint sanity unit release) claim nothing: a release's
# own check runs in a clone whose lab number another lab may hold. The claims
# hold while this script runs (SMSHARE_LAB_HOLDER), and no longer unless a lab came up.
claim_instances() {
  local s needs=; [ $# -eq 0 ] && needs=lab
  for s; do case $s in lint|sanity|unit|oldest-core|release) ;; *) needs=lab ;; esac; done
  [ -n "$needs" ] || return 0
  export SMSHARE_LAB_HOLDER=$$
  SMSHARE_LAB_INSTANCE=$(lab/labctl instance) || return 1
  SECOND_INSTANCE=$(SMSHARE_LAB_INSTANCE=auto SMSHARE_LAB_STATE="$PWD/.lab-second" lab/labctl instance) || return 1
  export SMSHARE_LAB_INSTANCE SECOND_INSTANCE
}

# Each stream its own temp folder: two sessions at once never clean up each other's.
stage_lab_tests() {
  pytest -q --durations=40 --basetemp "/tmp/smshare-pytest-$SMSHARE_LAB_INSTANCE-lab" -m "lab and not second_lab" \
    "${INTEGRATION[@]}"
}

stage_fleet_tests() {
  on_second_lab pytest -q --durations=40 --basetemp "/tmp/smshare-pytest-$SECOND_INSTANCE-fleet" \
    -m "lab and second_lab and lab_fleet" "${INTEGRATION[@]}"
}

stage_second_lab_tests() {
  on_second_lab pytest -q --durations=40 --basetemp "/tmp/smshare-pytest-$SECOND_INSTANCE-second" \
    -m "lab and second_lab and not lab_fleet" "${INTEGRATION[@]}"
}

stage_other_tests() {
  pytest -q --durations=40 --basetemp "/tmp/smshare-pytest-$SMSHARE_LAB_INSTANCE-other" -m "not lab" "${INTEGRATION[@]}"
}

stage_integration() {
  all_streams "lab-tests" "other-tests" "fleet-tests second-lab-tests"
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
  return "$rc"
}

# run_stream NAME STAGE...: the stages in order, stopping at the first failure;
# each stage's time goes to $LOGS/NAME.times.
run_stream() {
  local name=$1; shift
  : > "$LOGS/$name.times"
  for s in "$@"; do
    printf '\n===== %s: stage %s =====\n' "$name" "$s"
    local start=$SECONDS
    "stage_${s//-/_}"; local rc=$?
    printf '%-16s %-7s %5ss\n' "$s" "$([ $rc -eq 0 ] && echo ok || echo FAILED)" "$((SECONDS - start))" >> "$LOGS/$name.times"
    if [ $rc -ne 0 ]; then
      printf '\n%s: stage %s FAILED (rc=%s)\n' "$name" "$s" "$rc"
      return $rc
    fi
  done
}

# all_streams "LAB STAGES" "OTHER STAGES" "SECOND STAGES": the three at once. The
# lab and second streams' output goes to $LOGS/lab.log and $LOGS/second.log,
# shown when they end; the other stream's goes to the terminal.
all_streams() {
  local lab_stages other_stages second_stages
  read -ra lab_stages <<< "$1"
  read -ra other_stages <<< "$2"
  read -ra second_stages <<< "$3"
  run_stream lab "${lab_stages[@]}" > "$LOGS/lab.log" 2>&1 &
  local lab_pid=$!
  run_stream second "${second_stages[@]}" > "$LOGS/second.log" 2>&1 &
  local second_pid=$!
  run_stream other "${other_stages[@]}"
  local other_rc=$?
  printf '\n===== waiting for the second stream (log: %s/second.log) =====\n' "$LOGS"
  wait "$second_pid"
  local second_rc=$?
  cat "$LOGS/second.log"
  printf '\n===== waiting for the lab stream (log: %s/lab.log) =====\n' "$LOGS"
  wait "$lab_pid"
  local lab_rc=$?
  cat "$LOGS/lab.log"
  [ "$lab_rc" -eq 0 ] && [ "$other_rc" -eq 0 ] && [ "$second_rc" -eq 0 ]
}

mkdir -p "$LOGS"
rm -f "$LOGS"/*.times
claim_instances "$@" || exit 1
total_start=$SECONDS
if [ $# -gt 0 ]; then
  run_stream stages "$@"; rc=$?
else
  all_streams "lab-tests" "lint sanity unit oldest-core other-tests" "fleet-tests second-lab-tests release"; rc=$?
fi
printf '\n===== stage times =====\n'
for name in stages other second lab; do
  [ -s "$LOGS/$name.times" ] && { echo "[$name stream]"; cat "$LOGS/$name.times"; }
done
printf '%-24s %5ss\n' "total (wall)" "$((SECONDS - total_start))"
exit $rc
