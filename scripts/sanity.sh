#!/usr/bin/env bash
# ansible-test sanity on what ships: the tarball `ansible-galaxy collection
# build` makes from the tracked files (committed, plus uncommitted changes to
# tracked files), extracted at .../ansible_collections/smshare/kai and checked
# with its own tests/sanity/ignore-2.19.txt, which names shipped files only
# (tests/unit/collection/test_sanity_ignores.py). Extra arguments go to that
# run (`scripts/sanity.sh --test ignores`).
#
# Then the files that stay home (lab/, benchmarks/, scripts/, molecule/,
# tests/integration/, ...: what galaxy.yml's build_ignore leaves out of the
# tarball) are held to the same pep8 and pylint rules, by the same
# ansible-test, on a copy of the tracked tree with those files as the targets.
#
# Tests that need Docker are not run.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh

# One work folder per clone (its path hashed): two clones' sanity runs never share one.
work=${SMSHARE_SANITY_DIR:-/tmp/smshare-sanity-$(printf %s "$PWD" | md5sum | cut -c1-10)}
tree=$work/tree/ansible_collections/smshare/kai        # the tracked files
shipped=$work/shipped/ansible_collections/smshare/kai  # the tarball's contents

# ansible-test fetches pip's bootstrap script from the internet; give it ours.
pip_version=$(python -c 'from ansible_test._internal.python_requirements import get_venv_packages as g; import types; print(g(types.SimpleNamespace(version="3.11"))["pip"])')
cache=~/.ansible/test/cache/get_pip_${pip_version//./_}.py
mkdir -p "$(dirname "$cache")"
cp scripts/ansible_test_get_pip.py "$cache"

quiet() { grep -vE "^(WARNING: Location .* is ignored|Collecting|  Downloading|Requirement already)" || true; }

rm -rf "$work"; mkdir -p "$tree" "$shipped" "$work/dist"
git ls-files -z | rsync -a --from0 --files-from=- ./ "$tree/"
ansible-galaxy collection build --force --output-path "$work/dist" "$tree" >/dev/null
tar -xzf "$work"/dist/smshare-kai-*.tar.gz -C "$shipped"

echo "== sanity: the built tarball's contents ($(find "$shipped" -type f | wc -l) files)"
cd "$shipped"
git init -q && git add -A
ansible-test sanity --requirements --python 3.11 --color no "$@" 2>&1 | quiet
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || exit "$rc"

cd "$tree"
git init -q && git add -A
mapfile -t targets < <(git ls-files | while read -r f; do [ -e "$shipped/$f" ] || echo "$f"; done)
echo "== sanity: pep8 and pylint on the ${#targets[@]} tracked files that do not ship"
ansible-test sanity --requirements --python 3.11 --color no --test pep8 --test pylint "${targets[@]}" 2>&1 | quiet
exit "${PIPESTATUS[0]}"
