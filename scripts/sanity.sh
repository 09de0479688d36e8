#!/usr/bin/env bash
# ansible-test sanity on the committed tree (plus uncommitted tracked changes).
# ansible-test needs the tree at .../ansible_collections/smshare/kai, so the
# tracked files are copied there. Tests that need Docker are not run.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh

work=${SMSHARE_SANITY_DIR:-/tmp/smshare-sanity-$SMSHARE_LAB_INSTANCE}
dest=$work/ansible_collections/smshare/kai

# ansible-test fetches pip's bootstrap script from the internet; give it ours.
pip_version=$(python -c 'from ansible_test._internal.python_requirements import get_venv_packages as g; import types; print(g(types.SimpleNamespace(version="3.11"))["pip"])')
cache=~/.ansible/test/cache/get_pip_${pip_version//./_}.py
mkdir -p "$(dirname "$cache")"
cp scripts/ansible_test_get_pip.py "$cache"

rm -rf "$dest"; mkdir -p "$dest"
git ls-files -z | rsync -a --from0 --files-from=- ./ "$dest/"
cd "$dest"
git init -q && git add -A
ansible-test sanity --requirements --python 3.11 --color no "$@" 2>&1 \
  | grep -vE "^(WARNING: Location .* is ignored|Collecting|  Downloading|Requirement already)"
