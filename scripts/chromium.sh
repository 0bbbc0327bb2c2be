#!/usr/bin/env bash
# Debian's Chromium, for the dashboard's browser test (tests/browser/). Installs the
# `chromium` package with apt when it is missing (root; `apt-get update` first when the
# package lists do not know it), then prints one line on stdout, CHROMIUM=<path>, and
# nothing else; progress goes to stderr. Playwright (PyPI, in .venv) drives this binary
# (its own browser download is never used: `executable_path`).
#
#   eval "$(bash scripts/chromium.sh)"; export CHROMIUM
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/apt.sh"  # apt_get: one apt-get at a time
find_it() { command -v chromium || command -v chromium-browser || true; }
bin=$(find_it)
if [[ -z $bin ]]; then
  if [[ $(id -u) != 0 ]]; then
    echo "chromium.sh: chromium is not installed and this is not root: apt-get install" \
      "chromium as root" >&2
    exit 2
  fi
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-cache show chromium >/dev/null 2>&1; then
    echo "chromium.sh: apt-get update" >&2
    apt_get update -qq >&2
  fi
  echo "chromium.sh: apt-get install chromium" >&2
  apt_get install -y -qq --no-install-recommends chromium fonts-dejavu-core >&2
  bin=$(find_it)
fi
if [[ -z $bin ]]; then
  echo "chromium.sh: chromium was installed but is not on PATH" >&2
  exit 1
fi
echo "CHROMIUM=$bin"
