#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine for the collection's tests and lab:
# pinned apt packages, a pinned virtualenv in .venv (and .venv-oldest, the
# oldest ansible-core the collection claims), and the collection made
# findable by its FQCN (smshare.kai) through .collections/.
# Safe to re-run: every step checks before it acts.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. scripts/env.sh

step() { printf '\n== %s\n' "$*"; }

apt_install() {
  local wanted=() missing=() line name
  while read -r line; do
    line=${line%%#*}; line=${line// /}
    [ -n "$line" ] && wanted+=("$line")
  done < requirements/apt.txt
  for line in "${wanted[@]}"; do
    name=${line%%=*}
    [ "$(dpkg-query -W -f='${Version}' "$name" 2>/dev/null)" = "${line#*=}" ] || missing+=("$line")
  done
  if [ ${#missing[@]} -eq 0 ]; then echo "apt: all ${#wanted[@]} pinned packages present"; return; fi
  local apt=(apt-get -y -q -o DPkg::Lock::Timeout=600 --no-install-recommends)
  export DEBIAN_FRONTEND=noninteractive
  apt-get -q -o DPkg::Lock::Timeout=600 update >/dev/null
  if ! "${apt[@]}" install --allow-downgrades "${missing[@]}"; then
    echo "WARNING: the mirror no longer carries some pinned versions (a Debian point release?)." >&2
    echo "WARNING: installing the current bookworm versions; update requirements/apt.txt." >&2
    "${apt[@]}" install "${missing[@]%%=*}"
  fi
}

# python_env VENV REQUIREMENTS: VENV holds exactly REQUIREMENTS (a stamp of its hash).
python_env() {
  local venv=$1 requirements=$2 stamp=$1/.requirements.sha256 sum
  sum=$(sha256sum "$requirements" | cut -d' ' -f1)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$sum" ]; then
    echo "venv: $venv matches $requirements"; return
  fi
  python3.11 -m venv "$venv" 2>/dev/null || python3 -m venv "$venv"
  # This machine's pip config lists local indexes that may be empty: not errors.
  "$venv"/bin/pip install -q --disable-pip-version-check -r "$requirements" 2>&1 \
    | { grep -v "^WARNING: Location .* is ignored" || true; }
  echo "$sum" > "$stamp"
}

# The oldest ansible-core the collection claims (meta/runtime.yml), for the
# test command's oldest-core stage, with the collections the pinned ansible
# package ships (galaxy.yml's lower bounds) found where ansible finds them in
# .venv: in its site-packages.
oldest_core_env() {
  python_env .venv-oldest requirements/python-oldest.txt
  local site bundled
  # Resolved: a clone whose venvs are links to these (the release test's) must
  # not point the link at itself.
  site=$(realpath -e "$(.venv-oldest/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')")
  bundled=$(realpath -e "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/ansible_collections")
  ln -sfn "$bundled" "$site/ansible_collections"
  echo "oldest core: $(.venv-oldest/bin/ansible --version | head -1), collections from $bundled"
}

collection_link() {
  mkdir -p .collections/ansible_collections/smshare
  ln -sfn ../../.. .collections/ansible_collections/smshare/kai
  test -f .collections/ansible_collections/smshare/kai/galaxy.yml
  echo "collection: smshare.kai -> $root"
}

step "apt packages";        time apt_install
step "python virtualenv";   time python_env .venv requirements/python.txt
step "oldest ansible-core"; time oldest_core_env
step "collection path";     collection_link
