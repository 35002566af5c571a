#!/usr/bin/env bash
# Install the system tools the tests need, from the system's package manager (Debian/Ubuntu apt):
# OpenSSH client and server, rsync and tmux (scripts/remote.sh and its tests); Chromium, which the
# web page's browser tests drive headless (Playwright with the system's browser: no download); and
# cmake, g++ and make, which build llama.cpp (scripts/build-llama-server.sh). Idempotent: does
# nothing when every tool is present, and runs `apt-get update` only when the package lists cannot
# provide what is missing. Called by scripts/test.sh before its stages; safe to run by hand (as
# root, or as a user with sudo).
set -euo pipefail

# tool path or command -> Debian package that provides it
declare -A provider=(
  [ssh]=openssh-client
  [/usr/sbin/sshd]=openssh-server
  [rsync]=rsync
  [tmux]=tmux
  [chromium]=chromium
  [cmake]=cmake
  [g++]=g++
  [make]=make
  [systemd-analyze]=systemd
)

missing=()
for tool in ssh /usr/sbin/sshd rsync tmux chromium cmake g++ make systemd-analyze; do
  if [[ $tool == /* ]]; then
    [ -x "$tool" ] && continue
  else
    command -v "$tool" >/dev/null 2>&1 && continue
  fi
  missing+=("${provider[$tool]}")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "system deps: openssh-client, openssh-server, rsync, tmux, chromium, cmake, g++, make already installed"
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "system deps: missing ${missing[*]} and apt-get is not available (not a Debian or Ubuntu" \
    "system): install these packages with your system's package manager, then run the tests again" >&2
  exit 1
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
  else
    echo "system deps: missing ${missing[*]}; installing them needs root and sudo is not" \
      "available: run \`scripts/install-system-deps.sh\` as root once, then the tests again" >&2
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
