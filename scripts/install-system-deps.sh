#!/usr/bin/env bash
# Install the system tools that scripts/remote.sh and its tests need, from the system's package
# manager (Debian/Ubuntu apt): OpenSSH client and server, rsync and tmux; and Chromium, which the
# web page's browser tests drive headless (Playwright with the system's browser: no download). Idempotent: does nothing
# when every tool is present, and runs `apt-get update` only when the package lists cannot provide
# what is missing. Called by .ci/run before the tests; safe to run by hand (as root or with sudo).
set -euo pipefail

# tool path or command -> Debian package that provides it
declare -A provider=(
  [ssh]=openssh-client
  [/usr/sbin/sshd]=openssh-server
  [rsync]=rsync
  [tmux]=tmux
  [chromium]=chromium
)

missing=()
for tool in ssh /usr/sbin/sshd rsync tmux chromium; do
  if [[ $tool == /* ]]; then
    [ -x "$tool" ] && continue
  else
    command -v "$tool" >/dev/null 2>&1 && continue
  fi
  missing+=("${provider[$tool]}")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "system deps: openssh-client, openssh-server, rsync, tmux, chromium already installed"
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "system deps: missing ${missing[*]} and apt-get is not available; install them with your" \
    "system's package manager" >&2
  exit 1
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
  else
    echo "system deps: missing ${missing[*]}; run this script as root (or install sudo)" >&2
    exit 1
  fi
fi

# The lists are stale or absent when apt knows no installable candidate for a package.
needs_update=0
for pkg in "${missing[@]}"; do
  candidate=$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/ {print $2}')
  if [ -z "$candidate" ] || [ "$candidate" = "(none)" ]; then
    needs_update=1
  fi
done

export DEBIAN_FRONTEND=noninteractive
if [ "$needs_update" -eq 1 ]; then
  echo "system deps: apt-get update (package lists do not offer ${missing[*]})"
  "${sudo[@]}" apt-get update -qq
fi
echo "system deps: installing ${missing[*]}"
if ! "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"; then
  # An install from lists that exist but are out of date fails on vanished package versions.
  [ "$needs_update" -eq 1 ] && exit 1
  echo "system deps: install failed; retrying after apt-get update"
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "system deps: installed ${missing[*]}"
