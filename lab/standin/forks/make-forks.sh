#!/usr/bin/env bash
# Stand-in (lab only): creates the two fork repositories the role clones, as
# real bare git repositories under OUT-DIR (each pinned commit holds its
# template folder: kai-scheduler/ or gpu-fractioning/, with the charts at the
# forks' real chart paths, plus hack/):
#   OUT-DIR/KAI-Scheduler.git      main + refs/pull/2368/head
#   OUT-DIR/gpu-fractioning.git    main + refs/pull/147/head
# As upstream, each pinned fork commit is reachable only through its
# pull-request ref (a plain clone does not fetch it). Fixed authors and dates
# make the SHAs the same on every machine. Writes OUT-DIR/forks.json with
# url, pr_ref and commit of each fork.
#
#   lab/standin/forks/make-forks.sh OUT-DIR
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 OUT-DIR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)

export GIT_AUTHOR_NAME="smshare stand-in" GIT_AUTHOR_EMAIL="standin@smshare.invalid"
export GIT_COMMITTER_NAME="$GIT_AUTHOR_NAME" GIT_COMMITTER_EMAIL="$GIT_AUTHOR_EMAIL"
export GIT_CONFIG_NOSYSTEM=1 HOME=$out  # no user config changes the SHAs
git_() { git -c init.defaultBranch=main -c commit.gpgsign=false -c core.autocrlf=false "$@"; }

make_fork() {  # NAME PR TEMPLATE
  local name=$1 pr=$2 template=$3 work
  work=$(mktemp -d)
  git_ init -q "$work"
  printf '# %s (stand-in)\n\nUpstream main of the lab stand-in for %s.\n' "$name" "$name" >"$work/README.md"
  git_ -C "$work" add README.md
  GIT_AUTHOR_DATE="2026-01-05T10:00:00Z" GIT_COMMITTER_DATE="2026-01-05T10:00:00Z" \
    git_ -C "$work" commit -q -m "Upstream main"
  git_ -C "$work" checkout -q -b "pr-$pr"
  mkdir -p "$work/hack"
  # The fork's tree: Makefile, charts (and their sources) from the template folder.
  cp -a "$here/$template/." "$work/"
  mv "$work/fork.gitignore" "$work/.gitignore"
  cp "$here/hack/standin-image.sh" "$here/hack/standin-record.py" "$here/hack/standin-base.py" "$work/hack/"
  # The programs the images run (lab/standin/controllers) and the MPS stand-in mpsd runs.
  mkdir -p "$work/hack/standin/controllers" "$work/hack/standin/bin"
  cp -a "$here/../controllers/standin" "$work/hack/standin/controllers/"
  find "$work/hack/standin" -name __pycache__ -prune -exec rm -rf {} +
  cp "$here/../bin/nvidia-cuda-mps-control" "$work/hack/standin/bin/"
  git_ -C "$work" add -A
  GIT_AUTHOR_DATE="2026-01-06T10:00:00Z" GIT_COMMITTER_DATE="2026-01-06T10:00:00Z" \
    git_ -C "$work" commit -q -m "Fork change (pull request #$pr)"
  # upstream moves on after the pull request was opened
  git_ -C "$work" checkout -q main
  printf '\nLater upstream work.\n' >>"$work/README.md"
  GIT_AUTHOR_DATE="2026-01-07T10:00:00Z" GIT_COMMITTER_DATE="2026-01-07T10:00:00Z" \
    git_ -C "$work" commit -q -am "Upstream moves on"
  rm -rf "$out/$name.git"
  git_ init -q --bare "$out/$name.git"
  git_ -C "$work" push -q "$out/$name.git" main:refs/heads/main "pr-$pr:refs/pull/$pr/head"
  git_ -C "$work" rev-parse "pr-$pr"
  rm -rf "$work"
}

kai=$(make_fork KAI-Scheduler 2368 kai-scheduler)
frac=$(make_fork gpu-fractioning 147 gpu-fractioning)
cat >"$out/forks.json" <<JSON
{
  "kai_scheduler": {"url": "file://$out/KAI-Scheduler.git", "pr_ref": "pull/2368/head", "commit": "$kai"},
  "gpu_fractioning": {"url": "file://$out/gpu-fractioning.git", "pr_ref": "pull/147/head", "commit": "$frac"}
}
JSON
cat "$out/forks.json"
