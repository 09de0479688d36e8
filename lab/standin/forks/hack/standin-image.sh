#!/usr/bin/env bash
# Stand-in (lab only): what `docker build` / `docker push` / `docker buildx
# build --push` do for the forks' Makefiles, done with buildah and no Docker
# engine. Each image runs: a shared base layer (Debian's Python 3.11 from this
# build host, hack/standin-base.py, cached in the fork's .cache/) plus the
# fork's stand-in programs (hack/standin/) with the image's entrypoint
# (`python3 -m standin <fork>/<service>`) and a small file that names the
# service and the commit, so a new commit gives a new digest. STANDIN_FORK
# (kai-scheduler | gpu-fractioning) is set by the fork's Makefile.
#
#   standin-image.sh build  REF PLATFORM        (into local storage)
#   standin-image.sh push   REF                 (local storage -> registry)
#   standin-image.sh buildx REF PLATFORMS PUSH  (PUSH: --push or empty)
#
# buildx runs in a builder as docker buildx does: BUILDX_BUILDER, else the
# current builder of the stand-in docker CLI's state (lab/standin/docker/docker:
# $STANDIN_DOCKER_STATE/state.json, else ../forks/docker/state.json beside the
# folder of the `docker` on PATH; no state: "default", docker driver). Then:
#  - docker driver: one platform is built (and pushed with --push, else kept in
#    local storage: "loaded into the daemon"); several fail with buildx's
#    "ERROR: Multi-platform build is not supported for the docker driver." (exit 1);
#  - docker-container (or kubernetes, remote): without --push nothing is kept
#    anywhere, buildx's "No output specified with docker-container driver"
#    warning, exit 0; with --push to a registry on localhost/127.*/[::1] the
#    push fails, connection refused (the builder's localhost is its own), exit 1;
#  - a builder the state does not list: 'ERROR: no builder "NAME" found' (exit 1).
#
# Environment: STANDIN_BUILDAH_ROOT (private storage), STANDIN_CERT_DIR (CA for
# the registry), REGISTRY_AUTH_FILE (credentials written by `login`),
# STANDIN_SKIP_PUSH (space-separated "<fork>/<service>" whose push silently
# goes missing, to prove the role's final verification), STANDIN_ONLY_PLATFORMS
# (buildx builds these platforms whatever it was asked: a build that silently
# drops an architecture), BUILDX_BUILDER, STANDIN_DOCKER_STATE.
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

# Images whose programs run as root (privileged node daemons); the others run as 65532.
ROOT_IMAGES=" gpu-fractioning/mpsd gpu-fractioning/fractiond gpu-fractioning/metricsd "

base_image() {  # PLATFORMS -> the base image (a local manifest list covering PLATFORMS)
  local platforms=$1 tar key ref dir
  tar=$(python3 hack/standin-base.py .cache/standin-base)
  key=$(basename "$tar" .tar)
  ref="localhost/smshare-standin-base:${key#standin-base-}-$(printf '%s' "$platforms" | tr ',/' '__')"
  if ! "${buildah_cmd[@]}" manifest inspect "$ref" >/dev/null 2>&1; then
    dir=$(mktemp -d)
    ln "$tar" "$dir/base.tar" 2>/dev/null || cp "$tar" "$dir/base.tar"
    printf 'FROM scratch\nADD base.tar /\n' >"$dir/Containerfile"
    "${buildah_cmd[@]}" build --quiet --platform "$platforms" --manifest "$ref" "$dir" >/dev/null
    rm -rf "$dir"
  fi
  echo "$ref"
}

context() {  # REF BASE
  local ref=$1 base=$2 dir service user=65532:65532
  service=${ref%:*}
  service=${service##*/}
  dir=$(mktemp -d)
  printf 'stand-in image %s\ncommit %s\n' "${ref%:*}" "$(git rev-parse HEAD)" >"$dir/standin"
  mkdir -p "$dir/app"
  cp -a hack/standin/controllers/standin "$dir/app/"
  case "$ROOT_IMAGES" in *" ${STANDIN_FORK:?set by the fork Makefile}/$service "*) user=0:0 ;; esac
  {
    printf 'FROM %s\nCOPY standin /standin\nCOPY app /opt/standin\n' "$base"
    if [ "$STANDIN_FORK/$service" = gpu-fractioning/mpsd ]; then
      cp hack/standin/bin/nvidia-cuda-mps-control "$dir/"
      printf 'COPY nvidia-cuda-mps-control /usr/bin/nvidia-cuda-mps-control\n'
    fi
    printf 'ENV PYTHONPATH=/opt/standin PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1\n'
    printf 'USER %s\n' "$user"
    printf 'ENTRYPOINT ["/usr/bin/python3", "-m", "standin", "%s/%s"]\n' "$STANDIN_FORK" "$service"
  } >"$dir/Containerfile"
  echo "$dir"
}

build() {  # REF PLATFORMS [manifest]
  local ref=$1 platforms=$2 mode=${3:-} dir base rc=0
  base=$(base_image "$platforms")
  dir=$(context "$ref" "$base")
  if [ "$mode" = manifest ]; then
    "${buildah_cmd[@]}" manifest rm "$ref" >/dev/null 2>&1 || true
    "${buildah_cmd[@]}" build --quiet --pull=never --platform "$platforms" --manifest "$ref" \
      --label "org.opencontainers.image.revision=$(git rev-parse HEAD)" "$dir" >/dev/null || rc=$?
  else
    "${buildah_cmd[@]}" build --quiet --pull=never --platform "$platforms" -t "$ref" \
      --label "org.opencontainers.image.revision=$(git rev-parse HEAD)" "$dir" >/dev/null || rc=$?
  fi
  rm -rf "$dir"
  return $rc
}

builder_driver() {  # -> "NAME DRIVER" of the builder buildx would use (DRIVER empty: no such builder)
  python3 - <<'PY'
import json, os, shutil
folder = os.environ.get("STANDIN_DOCKER_STATE")
if not folder:
    docker = shutil.which("docker")
    folder = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(docker))), "forks", "docker") if docker else ""
try:
    with open(os.path.join(folder, "state.json")) as handle:
        state = json.load(handle)
except (OSError, ValueError):
    state = {}
builders = state.get("builders", [{"name": "default", "driver": "docker"}])
name = os.environ.get("BUILDX_BUILDER") or state.get("current", "default")
print(name, next((b["driver"] for b in builders if b["name"] == name), ""))
PY
}

local_dial() {  # REF -> the address a push to a registry on localhost dials, or nothing
  local host=${1%%/*} port
  case "$host" in
    localhost|localhost:*|127.*|"[::1]"|"[::1]:"*) ;;
    *) return 0 ;;
  esac
  port=443
  case "$host" in *:[0-9]*) port=${host##*:}; host=${host%:*} ;; esac
  case "$host" in
    localhost) host=127.0.0.1 ;;
  esac
  echo "$host:$port"
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
    ref=$2 asked=$3 platforms=${STANDIN_ONLY_PLATFORMS:-$3} push=${4:-}
    read -r builder driver < <(builder_driver)
    if [ -z "$driver" ]; then
      echo "ERROR: no builder \"$builder\" found" >&2
      exit 1
    fi
    if [ "$driver" = docker ] && [ "${asked//,/}" != "$asked" ]; then
      echo "ERROR: Multi-platform build is not supported for the docker driver." >&2
      exit 1
    fi
    echo "#1 [internal] building $ref for $platforms (builder $builder, driver $driver)"
    if [ "$driver" != docker ]; then
      if [ "$push" != --push ]; then
        # The result stays in the builder's cache: no image in local storage or the registry.
        echo "WARNING: No output specified with $driver driver. Build result will only remain in the build cache. To push result image into registry use --push or to load image into docker use --load" >&2
        exit 0
      fi
      dial=$(local_dial "$ref")
      if [ -n "$dial" ]; then
        name=${ref%:*} tag=${ref##*:}
        echo "#2 exporting to image: pushing $ref"
        echo "ERROR: failed to solve: failed to push $ref: failed to do request: Head \"https://${ref%%/*}/v2/${name#*/}/manifests/$tag\": dial tcp $dial: connect: connection refused" >&2
        exit 1
      fi
    fi
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
