#!/usr/bin/env bash
# Cuts a release of smshare.kai: `make release VERSION=x.y.z`.
#
#   1. refuses a malformed version, a dirty tree, a version not newer than
#      galaxy.yml's, an existing tag;
#   2. runs the whole test command (`make test`: every stage, Molecule for every
#      role included); a failure stops the release with the tree untouched;
#   3. sets the version in galaxy.yml, writes the release summary (which says how
#      the release was tested) and builds changelogs/changelog.yaml and
#      CHANGELOG.md from the fragments (antsibull-changelog);
#   4. builds the collection tarball into dist/ and its .sha256, and runs the
#      test command's release stage on that very tarball (installed into an
#      empty path, a playbook run from it by FQCN);
#   5. commits galaxy.yml and the changelog, tags v<version>, prints what to
#      publish. Nothing leaves this machine.
#
# Variables (make or environment):
#   RELEASE_SKIP_TESTS=1        do not run the test command; the release notes say so
#   RELEASE_TEST_COMMAND="..."  the test command to run (default: make test); the
#                               release notes name it when it is not the default
#                               (tests/integration/release replaces it so the
#                               release test does not run the test command)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh

version=${1:-}
default_tests="make test"
test_command=${RELEASE_TEST_COMMAND:-$default_tests}
skip_tests=${RELEASE_SKIP_TESTS:-}

die() { printf 'release: %s\n' "$*" >&2; exit 1; }
step() { printf '\n== release %s: %s\n' "$version" "$*"; }

[ -n "$version" ] || die "give the version: make release VERSION=x.y.z"
[[ "$version" =~ ^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]] \
  || die "'$version' is not a semantic version x.y.z (Galaxy needs one)"
case "$skip_tests" in ""|0|1) ;; *) die "RELEASE_SKIP_TESTS must be 1 (or unset), not '$skip_tests'" ;; esac

dirty=$(git status --porcelain --untracked-files=normal)
[ -z "$dirty" ] || die "the tree has uncommitted changes; commit or stash them first:
$dirty"

current=$(python3 -c 'import yaml; print(yaml.safe_load(open("galaxy.yml"))["version"])')
python3 - "$version" "$current" <<'PY' || die "version $version is not newer than galaxy.yml's $current"
import sys
from packaging.version import Version
sys.exit(0 if Version(sys.argv[1]) > Version(sys.argv[2]) else 1)
PY
! git rev-parse -q --verify "refs/tags/v$version" >/dev/null || die "tag v$version already exists"
commit=$(git rev-parse --short HEAD)

if [ "$skip_tests" = 1 ]; then
  step "test command SKIPPED (RELEASE_SKIP_TESTS=1)"
  tested="This release was made WITHOUT running the test command (RELEASE_SKIP_TESTS=1)."
else
  step "test command: $test_command"
  start=$SECONDS
  bash -c "$test_command" || die "the test command failed ($test_command): nothing was changed"
  if [ "$test_command" = "$default_tests" ]; then
    tested="The whole test command (\`\`make test\`\`: lint, sanity, unit, integration with every Molecule scenario, release) passed on commit $commit in $((SECONDS - start)) s."
  else
    tested="Tested with \`\`$test_command\`\` on commit $commit in $((SECONDS - start)) s, NOT the whole test command (\`\`$default_tests\`\`)."
  fi
fi
# The tests must not have changed the tree either.
[ -z "$(git status --porcelain --untracked-files=normal)" ] || die "the test command left changes in the tree"

# From here on the tree changes: put it back as it was on any failure.
tarball=dist/smshare-kai-$version.tar.gz
undo() {
  echo "release: FAILED; restoring the tree to $commit" >&2
  git reset -q --hard HEAD
  git clean -q -fd -- changelogs
  rm -f "$tarball" "$tarball.sha256"
}
trap undo ERR

step "version and changelog"
sed -i "s/^version: .*/version: $version/" galaxy.yml
grep -qx "version: $version" galaxy.yml
printf -- '---\nrelease_summary: |-\n  Release %s of smshare.kai.\n  %s\n' "$version" "$tested" \
  > "changelogs/fragments/$version-release-summary.yml"
antsibull-changelog lint
antsibull-changelog release --version "$version"

step "collection tarball"
rm -f "$tarball" "$tarball.sha256"
ansible-galaxy collection build --output-path dist . >/dev/null
tar -xzOf "$tarball" MANIFEST.json \
  | python3 -c 'import json, sys; v = json.load(sys.stdin)["collection_info"]["version"]; sys.exit(v != sys.argv[1])' "$version"
(cd dist && sha256sum "$(basename "$tarball")" > "$(basename "$tarball").sha256")

step "the tarball installed and run by FQCN (the test command's release stage)"
SMSHARE_RELEASE_TARBALL=$PWD/$tarball bash scripts/test.sh release

step "commit and tag"
git add galaxy.yml CHANGELOG.md changelogs
git commit -q -m "Release $version" -m "$tested"
git tag -a "v$version" -m "smshare.kai $version" -m "$tested"
trap - ERR

sum=$(cut -d' ' -f1 "$tarball.sha256")
cat <<MSG

Release $version is ready (commit $(git rev-parse --short HEAD), tag v$version).
$tested

Publish:
  $tarball
  $tarball.sha256   (sha256 $sum)
  git push origin HEAD v$version
  ansible-galaxy collection publish $tarball --api-key <your key>   # or your Automation Hub
  the execution environment: scripts/ee.sh build <registry>/smshare-kai-ee:$version, then push it
Release notes: CHANGELOG.md, section v$version.
MSG
