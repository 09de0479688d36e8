#!/bin/sh
# Apache-2.0
# STAND-IN provisioning of a GPU-node container with what every real GPU node
# already has and a container lacks: its distribution's archive in apt's
# sources (here the lab's stand-in subset, <url>/distro/, with the running
# kernel's headers and python3-debian), initramfs-tools (here a stand-in
# whose "image" records the blacklisted modules), kmod's /etc/modprobe.d, and
# the site's CA (here the stand-in mirror's, for its https /private/ path). Run as root inside the node:
#
#   podman exec -i NODE sh -s URL < lab/standin/apt/provision-node.sh
#
# Safe to re-run: it changes nothing on a provisioned node.
set -eu
url=${1:?usage: provision-node.sh URL}
key=/usr/share/keyrings/smshare-standin-archive.gpg
list=/etc/apt/sources.list.d/smshare-standin-distro.list
entry="deb [signed-by=$key] ${url%/}/distro/ /"

mkdir -p /etc/modprobe.d
if [ ! -s "$key" ]; then
    python3 -c 'import sys, urllib.request; sys.stdout.buffer.write(urllib.request.urlopen(sys.argv[1], timeout=30).read())' \
        "${url%/}/distro/standin-archive-key.gpg" > "$key.tmp"
    mv "$key.tmp" "$key"
fi
ca=/usr/local/share/ca-certificates/smshare-standin-mirror.crt
if [ ! -s "$ca" ]; then
    python3 -c 'import sys, urllib.request; sys.stdout.buffer.write(urllib.request.urlopen(sys.argv[1], timeout=30).read())' \
        "${url%/}/distro/standin-ca.crt" > "$ca.tmp"
    mv "$ca.tmp" "$ca"
    update-ca-certificates >/dev/null 2>&1
fi
if [ "$(cat "$list" 2>/dev/null)" != "$entry" ]; then
    echo "$entry" > "$list"
    rm -f /var/lib/apt/lists/*_distro_*
fi
if ! grep -q STAND-IN /usr/sbin/update-initramfs 2>/dev/null; then
    apt-get -q -o Dir::Etc::sourcelist="$list" -o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0 update >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get -q -y -o Dir::Etc::sourcelist="$list" -o Dir::Etc::sourceparts=- \
        install initramfs-tools >/dev/null
    echo "provisioned: $entry; stand-in initramfs-tools"
fi
