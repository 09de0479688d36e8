#!/usr/bin/env bash
# Builds (once) the podman image the GPU-node containers and the Molecule
# scenarios run: Debian 12 with systemd as PID 1, python3 for Ansible, sshd
# (the lab reaches its GPU nodes over SSH, as a site does) and an empty
# /etc/machine-id, made with mmdebstrap and `podman import` (no registry).
#
#   lab/node-image.sh            ensure the image exists, print its name
#   lab/node-image.sh --force    rebuild even when the cached image is current
#
# The image carries a label with the hash of this recipe; a current image is
# reused, so calling this before every test costs a `podman image inspect`.
# Env: SMSHARE_NODE_IMAGE (name), SMSHARE_DEBIAN_MIRROR (bookworm mirror URL).
set -euo pipefail

image=${SMSHARE_NODE_IMAGE:-localhost/smshare-node:debian12}
mirror=${SMSHARE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
packages=python3,python3-apt,sudo,ca-certificates,gnupg,systemd,systemd-sysv,dbus,procps,iproute2,openssh-server
label=org.smshare.recipe

# The recipe: this file's text plus the inputs that change the result.
recipe_hash=$( { cat "${BASH_SOURCE[0]}"; echo "$mirror $packages"; } | sha256sum | cut -c1-16)

current=$(podman image inspect --format "{{ index .Labels \"$label\" }}" "$image" 2>/dev/null || true)
if [[ "${1:-}" != "--force" && "$current" == "$recipe_hash" ]]; then
    echo "$image"
    exit 0
fi

# One builder at a time (CI and the lab may call this together).
lock_dir=/var/cache/smshare-lab
mkdir -p "$lock_dir"
exec 9>"$lock_dir/node-image.lock"
flock 9
current=$(podman image inspect --format "{{ index .Labels \"$label\" }}" "$image" 2>/dev/null || true)
if [[ "${1:-}" != "--force" && "$current" == "$recipe_hash" ]]; then
    echo "$image"
    exit 0
fi

work=$(mktemp -d /var/tmp/smshare-node-image.XXXXXX)
trap 'rm -rf "$work"' EXIT

echo "building $image (recipe $recipe_hash) from $mirror" >&2
# The customize hooks: an empty machine-id (systemd makes one per container),
# no units that fail or wait without hardware, and apt that does not pull in
# recommends (keeps converges quick and predictable), and sshd host keys made
# by each container on its first boot, not shared by all. "$1" is mmdebstrap's
# root folder, expanded by the hook's shell, not here.
# shellcheck disable=SC2016
mmdebstrap --variant=apt --include="$packages" \
    --customize-hook='truncate -s 0 "$1/etc/machine-id"' \
    --customize-hook='rm -f "$1/var/lib/dbus/machine-id"' \
    --customize-hook='printf "APT::Install-Recommends \"false\";\n" > "$1/etc/apt/apt.conf.d/90smshare-no-recommends"' \
    --customize-hook='rm -f "$1"/etc/ssh/ssh_host_*' \
    --customize-hook='mkdir -p "$1/etc/systemd/system/ssh.service.d" && printf "[Service]\nExecStartPre=\nExecStartPre=/usr/bin/ssh-keygen -A\nExecStartPre=/usr/sbin/sshd -t\n" > "$1/etc/systemd/system/ssh.service.d/host-keys.conf"' \
    --customize-hook='chroot "$1" systemctl mask systemd-resolved.service systemd-timesyncd.service getty@tty1.service serial-getty@.service console-getty.service apt-daily.timer apt-daily-upgrade.timer >/dev/null 2>&1 || true' \
    bookworm "$work/rootfs.tar" "deb $mirror bookworm main" >&2

podman import \
    --change 'CMD ["/sbin/init"]' \
    --change 'STOPSIGNAL SIGRTMIN+3' \
    --change "LABEL $label=$recipe_hash" \
    "$work/rootfs.tar" "$image" >&2
echo "$image"
