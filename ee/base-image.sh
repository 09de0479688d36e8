#!/usr/bin/env bash
# Builds (once) the execution environment's base image without a registry:
# Debian 12 with python3, pip and venv (what ansible-builder's scripts need) and
# ee/pkgmgr as the package manager, made with mmdebstrap and `podman import`
# (the same approach as lab/node-image.sh).
#
#   ee/base-image.sh            ensure the image exists, print its name
#   ee/base-image.sh --force    rebuild even when the cached image is current
#
# The image carries a label with the hash of the recipe (this file, ee/pkgmgr,
# the mirror): a current image is reused. Builders take a lock under
# /var/cache/smshare-lab, shared with CI and the other clones on the machine.
# Env: SMSHARE_EE_BASE_IMAGE (name), SMSHARE_DEBIAN_MIRROR (bookworm mirror URL).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
image=${SMSHARE_EE_BASE_IMAGE:-localhost/smshare-ee-base:debian12}
mirror=${SMSHARE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
packages=python3,python3-pip,python3-venv,ca-certificates
label=org.smshare.recipe

recipe_hash=$( { cat "${BASH_SOURCE[0]}" "$here/pkgmgr"; echo "$mirror $packages"; } | sha256sum | cut -c1-16)

current_recipe() {
  podman image inspect --format "{{ index .Labels \"$label\" }}" "$image" 2>/dev/null || true
}
if [[ "${1:-}" != "--force" && "$(current_recipe)" == "$recipe_hash" ]]; then
  echo "$image"
  exit 0
fi

lock_dir=/var/cache/smshare-lab
mkdir -p "$lock_dir"
exec 9>"$lock_dir/ee-base-image.lock"
flock 9
if [[ "${1:-}" != "--force" && "$(current_recipe)" == "$recipe_hash" ]]; then
  echo "$image"
  exit 0
fi

work=$(mktemp -d /var/tmp/smshare-ee-base.XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "building $image (recipe $recipe_hash) from $mirror" >&2
# "$1" is mmdebstrap's root folder, expanded by the hook's shell, not here.
# shellcheck disable=SC2016
mmdebstrap --variant=apt --include="$packages" \
  --customize-hook="copy-in $here/pkgmgr /usr/local/sbin" \
  --customize-hook='printf "APT::Install-Recommends \"false\";\n" > "$1/etc/apt/apt.conf.d/90smshare-no-recommends"' \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
  bookworm "$work/rootfs.tar" "deb $mirror bookworm main" >&2

podman import \
  --change 'CMD ["/bin/bash"]' \
  --change "LABEL $label=$recipe_hash" \
  "$work/rootfs.tar" "$image" >&2
echo "$image"
