#!/usr/bin/env bash
# Builds the execution environment (execution-environment.yml) without a
# registry or an index during the image build:
#   1. the inputs under build/ee-inputs/: the collection tarball of this tree and
#      the wheels of every pinned Python package (downloaded once per pin set into
#      /var/cache/smshare-lab/ee-wheels/<hash>, shared by the clones on a machine);
#   2. the base image, made locally (ee/base-image.sh);
#   3. `ansible-builder create` into build/ee-context;
#   4. `podman build` of that context with the wheels mounted read-only, pip
#      pointed at them alone (skipped by `scripts/ee.sh create`).
#
#   scripts/ee.sh [create|build] [IMAGE]   (default: build localhost/smshare-kai-ee:latest)
# Prints each step's time.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh

action=${1:-build}
image=${2:-localhost/smshare-kai-ee:latest}
case "$action" in create|build) ;; *) echo "usage: scripts/ee.sh [create|build] [IMAGE]" >&2; exit 2 ;; esac

inputs=build/ee-inputs
context=build/ee-context
timed() {
  local label=$1 start=$SECONDS; shift
  "$@"
  printf 'ee: %-28s %4ss\n' "$label" "$((SECONDS - start))" >&2
}

# A tarball's bytes change with every build (timestamps): the previous one is
# kept when its MANIFEST.json (the checksum of every file) is the same, so a
# warm image build reuses its cached layers.
collection_tarball() {
  local new
  rm -rf "$inputs/dist"
  ansible-galaxy collection build --force --output-path "$inputs/dist" . >/dev/null
  new=$(echo "$inputs"/dist/smshare-kai-*.tar.gz)
  if [ ! -f "$inputs/smshare-kai.tar.gz" ] ||
     ! cmp -s <(tar -xzOf "$new" MANIFEST.json) <(tar -xzOf "$inputs/smshare-kai.tar.gz" MANIFEST.json); then
    cp "$new" "$inputs/smshare-kai.tar.gz"
  fi
  rm -rf "$inputs/dist"
}

# Every package the image's pip installs: the EE's own pins, ansible-core and
# ansible-runner, the image's init (dumb-init), and what ansible-builder's
# builder stage installs (bindep, PyYAML, packaging), each at a pinned version.
wheel_requirements() {
  grep -v '^\s*#' ee/requirements.txt | sed '/^\s*$/d'
  python3 - <<'PY'
import yaml
deps = yaml.safe_load(open("execution-environment.yml"))["dependencies"]
print(deps["ansible_core"]["package_pip"])
print(deps["ansible_runner"]["package_pip"])
print(yaml.safe_load(open("execution-environment.yml"))["options"]["container_init"]["package_pip"])
PY
  grep -iE '^(bindep|pyyaml|packaging)==' requirements/python.txt
}

wheels() {
  local reqs sum cache
  reqs=$(wheel_requirements | sort -u)
  sum=$( { echo "$reqs"; cat requirements/python.txt; } | sha256sum | cut -c1-16)
  cache=/var/cache/smshare-lab/ee-wheels/$sum
  if [ ! -f "$cache/.complete" ]; then
    mkdir -p "$cache"
    echo "ee: downloading wheels for the pinned set into $cache" >&2
    # Constrained by the whole frozen set: every transitive package at its tested version.
    echo "$reqs" > "$cache/requirements.txt"
    python3 -m pip download -q --disable-pip-version-check --only-binary=:all: \
      --python-version 3.11 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux1_x86_64 --platform linux_x86_64 --platform any \
      -c requirements/python.txt -r "$cache/requirements.txt" -d "$cache" 2>&1 \
      | { grep -v "^WARNING: Location .* is ignored" || true; }
    touch "$cache/.complete"
  fi
  rm -rf "$inputs/wheels"
  mkdir -p "$inputs/wheels"
  cp "$cache"/*.whl "$inputs/wheels/"
}

mkdir -p "$inputs"
timed "collection tarball" collection_tarball
timed "wheels" wheels
timed "base image" bash ee/base-image.sh >/dev/null
rm -rf "$context"
timed "ansible-builder create" ansible-builder create --file execution-environment.yml \
  --context "$context" --output-filename Containerfile -v 1 >/dev/null
[ "$action" = create ] && { echo "$context"; exit 0; }
# Every RUN step sees the wheels and a pip.conf that points pip at them alone;
# they are build-time mounts, not layers of the image.
timed "podman build" podman build --layers \
  --volume "$PWD/$inputs/wheels:/opt/smshare-wheels:ro" --volume "$PWD/ee/pip.conf:/etc/pip.conf:ro" \
  -f "$context/Containerfile" -t "$image" "$context" >&2
echo "$image"
