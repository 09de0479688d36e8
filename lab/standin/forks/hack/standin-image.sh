#!/usr/bin/env bash
# Stand-in (lab only): what `docker build` / `docker push` / `docker buildx
# build --push` do for the forks' Makefiles, done with buildah and no Docker
# engine. Each image is a scratch image holding one small file that names the
# service and the commit, so a new commit gives a new digest.
#
#   standin-image.sh build  REF PLATFORM        (into local storage)
#   standin-image.sh push   REF                 (local storage -> registry)
#   standin-image.sh buildx REF PLATFORMS PUSH  (PUSH: --push or empty)
#
# Environment: STANDIN_BUILDAH_ROOT (private storage), STANDIN_CERT_DIR (CA for
# the registry), REGISTRY_AUTH_FILE (credentials written by `login`),
# STANDIN_SKIP_PUSH (space-separated "<fork>/<service>" whose push silently
# goes missing, to prove the role's final verification), STANDIN_ONLY_PLATFORMS
# (buildx builds these platforms whatever it was asked: a build that silently
# drops an architecture), BUILDX_BUILDER.
set -euo pipefail

buildah_cmd=(buildah)
if [ -n "${STANDIN_BUILDAH_ROOT:-}" ]; then
  buildah_cmd+=(--root "$STANDIN_BUILDAH_ROOT/root" --runroot "$STANDIN_BUILDAH_ROOT/run" --storage-driver vfs)
fi
tls_args=()
[ -n "${STANDIN_CERT_DIR:-}" ] && tls_args=(--cert-dir "$STANDIN_CERT_DIR")

skipped() {
  local name=${1%:*} item
  for item in ${STANDIN_SKIP_PUSH:-}; do
    case "$name" in */"$item") return 0 ;; esac
  done
  return 1
}

context() {
  local ref=$1 dir
  dir=$(mktemp -d)
  printf 'stand-in image %s\ncommit %s\n' "${ref%:*}" "$(git rev-parse HEAD)" >"$dir/standin"
  printf 'FROM scratch\nCOPY standin /standin\n' >"$dir/Containerfile"
  echo "$dir"
}

build() {  # REF PLATFORMS [manifest]
  local ref=$1 platforms=$2 mode=${3:-} dir rc=0
  dir=$(context "$ref")
  if [ "$mode" = manifest ]; then
    "${buildah_cmd[@]}" manifest rm "$ref" >/dev/null 2>&1 || true
    "${buildah_cmd[@]}" build --quiet --platform "$platforms" --manifest "$ref" \
      --label "org.opencontainers.image.revision=$(git rev-parse HEAD)" "$dir" >/dev/null || rc=$?
  else
    "${buildah_cmd[@]}" build --quiet --platform "$platforms" -t "$ref" \
      --label "org.opencontainers.image.revision=$(git rev-parse HEAD)" "$dir" >/dev/null || rc=$?
  fi
  rm -rf "$dir"
  return $rc
}

case "$1" in
  build)
    echo "#1 building $2 for $3"
    build "$2" "$3"
    ;;
  push)
    echo "The push refers to repository [${2%:*}]"
    if skipped "$2"; then echo "${2##*:}: pushed"; exit 0; fi
    "${buildah_cmd[@]}" push --quiet "${tls_args[@]}" "$2" "docker://$2"
    echo "${2##*:}: pushed"
    ;;
  buildx)
    ref=$2 platforms=${STANDIN_ONLY_PLATFORMS:-$3} push=${4:-}
    if [ "${platforms//,/}" != "$platforms" ] && [ -z "$push" ] && [ "${BUILDX_BUILDER:-}" = default ]; then
      echo "ERROR: Multi-platform build is not supported for the docker driver." >&2
      exit 1
    fi
    echo "#1 [internal] building $ref for $platforms (builder ${BUILDX_BUILDER:-current})"
    build "$ref" "$platforms" manifest
    if [ "$push" = --push ]; then
      echo "#2 exporting to image: pushing $ref"
      skipped "$ref" && exit 0
      "${buildah_cmd[@]}" manifest push --quiet --all "${tls_args[@]}" "$ref" "docker://$ref"
    fi
    ;;
  *)
    echo "usage: $0 build|push|buildx ..." >&2
    exit 2
    ;;
esac
