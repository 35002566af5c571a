#!/usr/bin/env bash
# Remote command strings are built on this side on purpose, from single-quoted words (see sq):
# shellcheck disable=SC2029
# Train on a GPU server over SSH; every run lives in a detached tmux session on the server, so a
# dropped connection never stops it.
#
#   scripts/remote.sh sync [--data PATH]... [-v]        push code and configs (and data only when asked)
#   scripts/remote.sh setup                             install uv if missing, then `uv sync --locked`
#   scripts/remote.sh run [--nproc N] CONFIG [k=v ...]  validate here, start enlace-train in tmux
#   scripts/remote.sh logs [RUN] [-n LINES]             follow a run's output (default: newest run)
#   scripts/remote.sh status                            runs, their state, last metrics line of each
#   scripts/remote.sh attach RUN                        attach to the run's tmux session (Ctrl-b d)
#   scripts/remote.sh stop RUN [--no-wait]              SIGTERM the run: it checkpoints and exits
#   scripts/remote.sh pull RUN [--to DIR] [--report]    metrics, config, newest checkpoint (+ report)
#
# Settings come from .env at the repository root (see .env.example), or from the file named by
# ENLACE_REMOTE_ENV; variables already set in the environment win. The file is parsed, never
# executed. SSH runs with BatchMode=yes (no prompts) and StrictHostKeyChecking=yes (an unknown or
# changed host key stops everything before anything is sent).
#
# Quoting: every value that reaches the server (paths, run names, overrides) travels as a single-
# quoted word inside the one command string ssh hands to the remote login shell (which must be a
# POSIX shell: bash, dash, zsh), and from there as argv, never as code; the remote scripts below are
# constant text. The server needs bash, rsync and tmux; `setup` brings uv.
#
# Exit codes: 0 ok; 1 remote or connection failure (one line on stderr says which); 2 bad input
# (usage, settings, an invalid config).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prog=remote.sh

die() { # die CODE MESSAGE: one line on stderr, then exit
  local code=$1
  shift
  printf '%s: %s\n' "$prog" "$*" >&2
  exit "$code"
}
usage() {
  sed -n '1,20s/^#   scripts\/remote.sh /  /p' "${BASH_SOURCE[0]}" | sed '1i usage: scripts/remote.sh VERB ...'
}
usage_error() {
  printf '%s: %s\n' "$prog" "$*" >&2
  usage >&2
  exit 2
}

# Single-quote a word for a POSIX shell: 'it'\''s'. Safe for any byte string.
sq() {
  local s=${1//\'/\'\\\'\'}
  printf "'%s'" "$s"
}

# A scratch directory, removed on exit.
scratch=""
new_scratch() { scratch=$(mktemp -d); }
trap '[[ -z $scratch ]] || rm -rf -- "$scratch"' EXIT

# Same name rule as enlace-config's run.name (RUN_NAME_PATTERN); "." and ".." are never names.
valid_run_name() { [[ $1 =~ ^[A-Za-z0-9._-]+$ && $1 != . && $1 != .. ]]; }

# ---------------------------------------------------------------------------------------------
# Settings
known_settings=(HOST USER PORT KEY DIR KNOWN_HOSTS CONNECT_TIMEOUT STOP_TIMEOUT)
env_file=""

load_settings() {
  env_file=${ENLACE_REMOTE_ENV:-$root/.env}
  if [[ -n ${ENLACE_REMOTE_ENV:-} && ! -f $env_file ]]; then
    die 2 "ENLACE_REMOTE_ENV names $env_file, which does not exist"
  fi
  if [[ -f $env_file ]]; then
    local line key value n=0
    while IFS= read -r line || [[ -n $line ]]; do
      n=$((n + 1))
      line=${line%$'\r'}
      [[ $line =~ ^[[:space:]]*(#.*)?$ ]] && continue
      if [[ ! $line =~ ^[[:space:]]*(export[[:space:]]+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$ ]]; then
        die 2 "$env_file:$n: expected KEY=VALUE, got: $line"
      fi
      key=${BASH_REMATCH[2]}
      value=${BASH_REMATCH[3]}
      if [[ $value =~ ^\"([^\"]*)\"[[:space:]]*(#.*)?$ || $value =~ ^\'([^\']*)\'[[:space:]]*(#.*)?$ ]]; then
        value=${BASH_REMATCH[1]}
      else
        value=${value%%[[:space:]]#*}                    # KEY=value  # comment
        value=${value%"${value##*[![:space:]]}"}         # trailing blanks
      fi
      [[ $key == ENLACE_REMOTE_* ]] || continue # the file may hold other settings
      if [[ " ${known_settings[*]} " != *" ${key#ENLACE_REMOTE_} "* ]]; then
        die 2 "$env_file:$n: unknown setting $key (known: ${known_settings[*]/#/ENLACE_REMOTE_})"
      fi
      [[ -n ${!key+set} ]] && continue # the environment wins
      printf -v "$key" '%s' "$value"
    done <"$env_file"
  fi

  local missing=() k
  for k in HOST USER DIR; do
    local var=ENLACE_REMOTE_$k
    [[ -n ${!var:-} ]] || missing+=("$var")
  done
  if ((${#missing[@]})); then
    if [[ -f $env_file ]]; then
      die 2 "missing setting ${missing[*]} in $env_file (see .env.example)"
    fi
    die 2 "missing setting ${missing[*]}: no $env_file (copy .env.example to .env and fill it in)"
  fi

  host=$ENLACE_REMOTE_HOST
  user=$ENLACE_REMOTE_USER
  port=${ENLACE_REMOTE_PORT:-22}
  key_file=${ENLACE_REMOTE_KEY:-}
  known_hosts=${ENLACE_REMOTE_KNOWN_HOSTS:-}
  rdir=$ENLACE_REMOTE_DIR
  connect_timeout=${ENLACE_REMOTE_CONNECT_TIMEOUT:-10}
  stop_timeout=${ENLACE_REMOTE_STOP_TIMEOUT:-600}

  [[ $host =~ ^[A-Za-z0-9._:%-]+$ && $host != -* ]] ||
    die 2 "ENLACE_REMOTE_HOST=$host is not a host name or address"
  [[ $user =~ ^[A-Za-z0-9._][A-Za-z0-9._-]*$ ]] || die 2 "ENLACE_REMOTE_USER=$user is not a user name"
  if [[ ! $port =~ ^[0-9]+$ ]] || ((port < 1 || port > 65535)); then
    die 2 "ENLACE_REMOTE_PORT=$port is not a port number (1-65535)"
  fi
  [[ $connect_timeout =~ ^[0-9]+$ ]] || die 2 "ENLACE_REMOTE_CONNECT_TIMEOUT must be whole seconds"
  [[ $stop_timeout =~ ^[0-9]+$ ]] || die 2 "ENLACE_REMOTE_STOP_TIMEOUT must be whole seconds"
  # A leading "~/" (a literal tilde: the file is not run by a shell) means the local home.
  # shellcheck disable=SC2088
  if [[ -n $key_file ]]; then
    [[ $key_file == "~/"* ]] && key_file=$HOME/${key_file#"~/"}
    [[ -f $key_file && -r $key_file ]] || die 2 "ENLACE_REMOTE_KEY=$key_file: no such readable key file"
  fi
  # shellcheck disable=SC2088
  if [[ -n $known_hosts ]]; then
    [[ $known_hosts == "~/"* ]] && known_hosts=$HOME/${known_hosts#"~/"}
    [[ -f $known_hosts ]] || die 2 "ENLACE_REMOTE_KNOWN_HOSTS=$known_hosts: no such file"
  fi
  # The remote directory: absolute, or relative to the login directory (home); "~/x" means "x".
  [[ $rdir == "~" ]] && rdir=.
  # shellcheck disable=SC2088
  [[ $rdir == "~/"* ]] && rdir=${rdir#"~/"}
  [[ $rdir != -* && $rdir != *$'\n'* && -n $rdir ]] || die 2 "ENLACE_REMOTE_DIR=$rdir is not a usable path"
  rdir=${rdir%/}
  [[ -n $rdir ]] || rdir=/

  ssh_opts=(-o BatchMode=yes -o StrictHostKeyChecking=yes -o "ConnectTimeout=$connect_timeout"
    -o ServerAliveInterval=15 -o ServerAliveCountMax=4 -p "$port")
  [[ -n $key_file ]] && ssh_opts+=(-i "$key_file" -o IdentitiesOnly=yes)
  [[ -n $known_hosts ]] && ssh_opts+=(-o "UserKnownHostsFile=$known_hosts")
  target=$user@$host
  if [[ $host == *:* ]]; then rsync_host="$user@[$host]"; else rsync_host=$target; fi
  where="$target:$rdir"
}

# rsync parses -e itself: words split on spaces, quotes group them, backslashes are literal.
rsync_rsh() {
  local out=ssh a
  for a in "${ssh_opts[@]}"; do
    if [[ $a != *\'* ]]; then
      out+=" '$a'"
    elif [[ $a != *\"* ]]; then
      out+=" \"$a\""
    else
      die 2 "cannot pass $a to rsync's ssh (it holds both kinds of quotes)"
    fi
  done
  printf '%s' "$out"
}

# ---------------------------------------------------------------------------------------------
# Talking to the server

# One connection that does nothing, so that an unreachable host, a refused login or a host-key
# problem stops us with one line before any action starts.
connect() {
  local err rc=0 last
  err=$(ssh "${ssh_opts[@]}" "$target" true 2>&1 >/dev/null) || rc=$?
  ((rc == 0)) && return 0
  err=${err//$'\r'/}
  last=$(printf '%s\n' "$err" | grep -v '^[[:space:]]*$' | grep -v '^@' | tail -n 1)
  case $err in
  *"REMOTE HOST IDENTIFICATION HAS CHANGED"*)
    die 1 "host key of $host:$port has CHANGED (possible man-in-the-middle, or a reinstalled server): nothing was sent; check the new fingerprint with the server's owner, then update ${known_hosts:-~/.ssh/known_hosts}" ;;
  *"Host key verification failed"* | *"host key is known"* | *"No matching host key"*)
    die 1 "host key of $host:$port is not in ${known_hosts:-~/.ssh/known_hosts}: nothing was sent; log in once by hand with ssh -p $port $target and check the fingerprint, or set ENLACE_REMOTE_KNOWN_HOSTS" ;;
  *"Permission denied"* | *"Too many authentication failures"*)
    die 1 "$target:$port refused the login ($last): check ENLACE_REMOTE_USER and ENLACE_REMOTE_KEY (key authentication only, no passwords)" ;;
  *"Connection refused"* | *"timed out"* | *"Could not resolve"* | *"No route to host"* | *"Network is unreachable"* | *"Name or service not known"*)
    die 1 "cannot reach $host:$port ($last): check ENLACE_REMOTE_HOST and ENLACE_REMOTE_PORT, and that the server is up" ;;
  *)
    die 1 "ssh to $target:$port failed (exit $rc): ${last:-no message}" ;;
  esac
}

# The remote scripts: constant text, data only in "$@". $1 is always the remote directory.
read -r -d '' REMOTE_PRELUDE <<'EOF' || true
set -uo pipefail
export PATH="$HOME/.local/bin:$HOME/.cargo/bin:$PATH"
fail() { printf 'remote.sh: %s\n' "$*" >&2; exit 1; }
sq() { local s=${1//\'/\'\\\'\'}; printf "'%s'" "$s"; }
session_of() { local s=${1//./_}; printf '%s' "${s//:/_}"; }  # tmux turns . and : into _
# Running: its tmux session exists and the pane script has not written its exit file (its last act).
# The session alone is not enough: tmux can keep an ended pane's process unreaped for minutes while
# other runs share the server, and until then the session stays.
is_running() {
  [ ! -f ".enlace-remote/$1.exit" ] && tmux has-session -t "=$(session_of "$1")" 2>/dev/null
}
pane_pid() { tmux display-message -p -t "=$(session_of "$1"):" '#{pane_pid}'; }
latest_checkpoint() {  # newest checkpoints/step_N with its COMPLETE marker, relative to $1
  local best="" bestn=-1 d n
  for d in "$1"/checkpoints/step_*; do
    [ -f "$d/COMPLETE" ] || continue
    n=${d##*/step_}
    [[ $n =~ ^[0-9]+$ ]] || continue
    if ((10#$n > bestn)); then bestn=$((10#$n)); best=checkpoints/step_$n; fi
  done
  printf '%s' "$best"
}
run_out_dir() {  # the run's output directory, recorded by `run`
  [ -f ".enlace-remote/$1.out_dir" ] ||
    fail "no run named $1 was started with remote.sh in $PWD (scripts/remote.sh status lists them)"
  cat ".enlace-remote/$1.out_dir"
}
newest_run() {
  local f
  f=$(ls -t .enlace-remote/*.out_dir 2>/dev/null | head -n 1)
  [ -n "$f" ] || fail "no runs were started with remote.sh in $PWD"
  f=${f##*/}
  printf '%s' "${f%.out_dir}"
}
dir=$1
shift
cd -- "$dir" 2>/dev/null || fail "remote directory $dir does not exist on $(hostname): run scripts/remote.sh sync first"
EOF

remote_command() { # remote_command SCRIPT ARGS...: the one string ssh hands to the login shell
  local script=$1 cmd a
  shift
  cmd="bash -c $(sq "$REMOTE_PRELUDE"$'\n'"$script") remote.sh $(sq "$rdir")"
  for a in "$@"; do cmd+=" $(sq "$a")"; done
  printf '%s' "$cmd"
}

remote() { # remote SCRIPT ARGS...: run a remote script; 255 means the connection broke
  local rc=0
  ssh "${ssh_opts[@]}" "$target" "$(remote_command "$@")" || rc=$?
  ((rc == 255)) && die 1 "the connection to $target:$port failed or dropped"
  return "$rc"
}

# ---------------------------------------------------------------------------------------------
# Verbs

# What a run needs on the server; never .env, .venv, runs/ or data/ (data only with --data).
sync_items() {
  local item
  for item in pyproject.toml uv.lock .python-version README.md packages configs scripts benchmarks; do
    [[ -e $root/$item ]] && printf '%s\n' "$item"
  done
  return 0
}
sync_excludes=(--exclude=.env --exclude='.env.*' --exclude=.venv/ --exclude=.venvs/ --exclude=__pycache__/
  --exclude='*.pyc' --exclude=.pytest_cache/ --exclude=.ruff_cache/ --exclude=.hypothesis/
  --exclude='*.egg-info/' --exclude=dist/)

cmd_sync() {
  local verbose=0 dry=0 items=() data p rel
  mapfile -t items < <(sync_items)
  while (($#)); do
    case $1 in
    --data)
      (($# >= 2)) || usage_error "sync --data needs a PATH"
      data=$2
      shift 2
      [[ -e $data ]] || die 2 "sync --data $data: no such file or directory"
      p=$(cd "$(dirname "$data")" && pwd)/$(basename "$data")
      case $p in
      "$root"/*) rel=${p#"$root"/} ;;
      *) die 2 "sync --data $data: must be inside the repository ($root), to keep its path on the server" ;;
      esac
      rel=${rel%/.}
      items+=("$rel")
      ;;
    -v | --verbose) verbose=1; shift ;;
    -n | --dry-run) dry=1; shift ;;
    *) usage_error "sync: unknown argument $1" ;;
    esac
  done
  connect
  ssh "${ssh_opts[@]}" "$target" "mkdir -p -- $(sq "$rdir")" || die 1 "cannot create $rdir on $target"
  local flags=(-az --relative --delete -s --itemize-changes --stats "${sync_excludes[@]}")
  ((dry)) && flags+=(--dry-run)
  local out rc=0
  out=$(cd "$root" && rsync "${flags[@]}" -e "$(rsync_rsh)" -- "${items[@]}" "$rsync_host:$rdir/" 2>&1) || rc=$?
  if ((rc)); then
    printf '%s\n' "$out" | tail -n 5 >&2
    die 1 "rsync to $where failed (exit $rc)"
  fi
  local changes sent deleted bytes
  changes=$(printf '%s\n' "$out" | grep -E '^(<f|cd|\*deleting|cL|<L)' || true)
  sent=$(printf '%s\n' "$out" | grep -c '^<f' || true)
  deleted=$(printf '%s\n' "$out" | grep -c '^\*deleting' || true)
  bytes=$(printf '%s\n' "$out" | sed -n 's/^Total bytes sent: *//p')
  ((verbose)) && [[ -n $changes ]] && printf '%s\n' "$changes"
  printf 'sync: %s files sent, %s deleted%s -> %s (%s bytes on the wire; %s)\n' \
    "$sent" "$deleted" "$( ((dry)) && echo ' (dry run)')" "$where" "${bytes:-?}" "${items[*]}"
}

read -r -d '' REMOTE_SETUP <<'EOF' || true
[ -f pyproject.toml ] && [ -f uv.lock ] ||
  fail "no pyproject.toml and uv.lock in $PWD on the remote: run scripts/remote.sh sync first"
if command -v uv >/dev/null 2>&1; then
  echo "setup: uv already installed: $(uv --version) at $(command -v uv)"
else
  command -v python3 >/dev/null 2>&1 ||
    fail "uv is not installed and there is no python3 to install it with: install python3 and pip, or uv itself (https://docs.astral.sh/uv/)"
  python3 -m pip --version >/dev/null 2>&1 ||
    fail "uv is not installed and python3 has no pip: install pip (e.g. sudo apt-get install python3-pip), or uv itself (https://docs.astral.sh/uv/)"
  echo "setup: uv not found; installing it into the user's environment: python3 -m pip install --user uv"
  pip_install=(python3 -m pip install --user --quiet --disable-pip-version-check uv)
  if ! out=$("${pip_install[@]}" 2>&1); then
    if [[ $out == *externally-managed-environment* ]]; then
      echo "setup: the system python is externally managed (PEP 668); uv is a standalone binary, so installing it with --user --break-system-packages changes nothing else"
      out=$("${pip_install[@]}" --break-system-packages 2>&1) || { printf '%s\n' "$out" >&2; fail "pip could not install uv (above)"; }
    else
      printf '%s\n' "$out" >&2
      fail "pip could not install uv (above)"
    fi
  fi
  hash -r
  if ! command -v uv >/dev/null 2>&1; then
    # pip found uv already installed for this python, with its binary outside PATH: link it.
    bin=$(python3 -c 'from uv import find_uv_bin; print(find_uv_bin())' 2>/dev/null) ||
      fail "pip installed uv, but there is no uv in $HOME/.local/bin nor on PATH"
    mkdir -p "$HOME/.local/bin" && ln -sf "$bin" "$HOME/.local/bin/uv" && hash -r
    echo "setup: linked $HOME/.local/bin/uv to $bin"
  fi
  echo "setup: installed $(uv --version) at $(command -v uv)"
fi
command -v tmux >/dev/null 2>&1 ||
  echo "setup: warning: tmux is not installed on the remote and 'run' needs it (e.g. sudo apt-get install tmux)" >&2
command -v rsync >/dev/null 2>&1 ||
  echo "setup: warning: rsync is not installed on the remote and 'sync'/'pull' need it" >&2
if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -L 2>&1 | sed 's/^/setup: /'; fi
echo "setup: uv sync --locked in $PWD"
uv sync --locked || fail "uv sync --locked failed (above)"
echo "setup: done: $PWD/.venv matches uv.lock"
EOF

cmd_setup() {
  (($# == 0)) || usage_error "setup takes no arguments"
  connect
  remote "$REMOTE_SETUP"
}

read -r -d '' REMOTE_CONFIGS_HASH <<'EOF' || true
[ -d configs ] || { echo none; exit 0; }
sha=sha256sum
command -v sha256sum >/dev/null 2>&1 || sha="shasum -a 256"  # macOS
# shellcheck disable=SC2086  # $sha is a command and its options
find configs -type f ! -name '*.pyc' -print0 | LC_ALL=C sort -z | xargs -0 $sha | $sha | cut -d' ' -f1
EOF

read -r -d '' REMOTE_RUN <<'EOF' || true
name=$1 out_dir=$2 nproc=$3
shift 3   # the rest: CONFIG and the overrides, for enlace-train
session=$(session_of "$name")
command -v tmux >/dev/null 2>&1 || fail "tmux is not installed on the remote (e.g. sudo apt-get install tmux)"
command -v uv >/dev/null 2>&1 || fail "uv is not installed on the remote: run scripts/remote.sh setup first"
[ -f "$1" ] || fail "$1 is not in $PWD on the remote: run scripts/remote.sh sync first"
if [ "$nproc" -gt 1 ]; then  # one job on several processes (GPUs): torchrun, as DISTRIBUTED.md says
  set -- torchrun --standalone --nproc-per-node "$nproc" -m enlace_train "$@"
else
  set -- enlace-train "$@"
fi
if is_running "$name"; then
  fail "run $name is already running in tmux session $session on the remote; stop it first (scripts/remote.sh stop $name) or choose another run.name"
fi
tmux kill-session -t "=$session" 2>/dev/null  # an ended run's session that tmux has not cleared yet
mkdir -p -- "$out_dir" .enlace-remote || fail "cannot create $out_dir"
log=$out_dir/console.log
state=.enlace-remote/$name
printf '%s\n' "$out_dir" >"$state.out_dir"
rm -f -- "$state.exit" "$state.stop_requested"
# The pane: bash waits for the trainer even when `stop` signals the whole process group (the trap
# defers SIGTERM), and tee ignores SIGTERM so the trainer's last lines (its checkpoint) still reach
# the log; uv passes the signal on to the trainer.
pane_script='
log=$1 state=$2
shift 2
trap : TERM
export PYTHONUNBUFFERED=1  # the log shows each line as it is printed, not in 8 KB blocks
{ printf "[remote.sh] %s start: uv run" "$(date -u +%Y-%m-%dT%H:%M:%SZ)"; printf " %q" "$@"; echo; } | tee -a "$log"
uv run "$@" 2>&1 | (trap "" TERM; exec tee -a "$log")
rc=${PIPESTATUS[0]}
printf "[remote.sh] %s %s exited with code %s\n" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$1" "$rc" | tee -a "$log"
printf "%s\n" "$rc" >"$state.exit"  # last: the run is over once this file exists
exit "$rc"'
cmd="bash -c $(sq "$pane_script") enlace-run $(sq "$log") $(sq "$state")"
for a in "$@"; do cmd+=" $(sq "$a")"; done
tmux new-session -d -s "$session" -c "$PWD" -x 200 -y 50 "$cmd" || fail "tmux could not start session $session"
echo "run: started $name in tmux session $session on $(hostname):$PWD"
echo "run: output in $PWD/$log"
EOF

cmd_run() {
  local nproc=1
  if [[ ${1:-} == --nproc ]]; then
    [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || usage_error "run --nproc needs a number of processes (GPUs)"
    nproc=$2
    shift 2
  fi
  (($# >= 1)) || usage_error "run needs a CONFIG"
  local config=$1 a
  shift
  local overrides=("$@")
  for a in "${overrides[@]}"; do
    [[ $a =~ ^[A-Za-z_][A-Za-z0-9_.]*= ]] || die 2 "run: overrides are key=value (got: $a)"
  done
  [[ -f $config ]] || die 2 "run: $config: no such config file"
  local p rel
  p=$(cd "$(dirname "$config")" && pwd)/$(basename "$config")
  case $p in
  "$root"/*) rel=${p#"$root"/} ;;
  *) die 2 "run: $config must be inside the repository ($root) so that sync copies it" ;;
  esac

  # 1. Validate locally: enlace-config prints every problem and exits 2 on a bad config.
  command -v uv >/dev/null 2>&1 || die 2 "run: uv is not installed here, and validating the config needs it (pip install uv)"
  new_scratch
  local rc=0
  (cd "$root" && uv run -q enlace-config show "$rel" "${overrides[@]}") >"$scratch/resolved.yaml" || rc=$?
  if ((rc)); then
    die 2 "run: $rel ${overrides[*]}: the config is not valid (enlace-config above); nothing was sent"
  fi
  local name out_dir
  {
    IFS= read -r -d '' name && IFS= read -r -d '' out_dir
  } < <(cd "$root" && uv run -q python -c '
import sys
from ruamel.yaml import YAML
run = (YAML(typ="safe", pure=True).load(open(sys.argv[1], encoding="utf-8")) or {}).get("run") or {}
sys.stdout.write(str(run.get("name", "")) + "\0" + str(run.get("out_dir", "")) + "\0")
' "$scratch/resolved.yaml") || die 1 "run: could not read run.name and run.out_dir from enlace-config's output"
  valid_run_name "$name" || die 2 "run: run.name $name is not a valid run name ([A-Za-z0-9._-])"
  [[ -n $out_dir && $out_dir != *$'\n'* ]] || die 2 "run: run.out_dir $out_dir is not usable"

  # 2. The server must run what we validated: its configs/ must match ours.
  connect
  local here there
  here=$(cd "$root" && bash -c "$REMOTE_CONFIGS_HASH")
  remote "$REMOTE_CONFIGS_HASH" >"$scratch/remote-hash" || exit 1
  there=$(<"$scratch/remote-hash")
  [[ $here == "$there" ]] ||
    die 1 "run: configs/ on the remote differs from yours: run scripts/remote.sh sync first (nothing was started)"

  # 3. Start it under tmux.
  remote "$REMOTE_RUN" "$name" "$out_dir" "$nproc" "$rel" "${overrides[@]}"
  echo "run: follow it with scripts/remote.sh logs $name; stop it with scripts/remote.sh stop $name"
}

read -r -d '' REMOTE_LOGS <<'EOF' || true
name=${1:-} lines=$2
[ -n "$name" ] || name=$(newest_run) || exit 1
out_dir=$(run_out_dir "$name") || exit 1
log=$out_dir/console.log
if is_running "$name"; then
  echo "[remote.sh] following $log (run $name is running; Ctrl-C stops following, not the run)" >&2
  # Follow until the run ends by its exit file, not by the pane's pid (a pane tmux has not reaped
  # yet never "dies" for `tail --pid`). After a dropped connection tail dies at its next write
  # (SIGPIPE) or with this shell, which polls until the run ends.
  tail -n "$lines" -F --pid=$$ -- "$log" 2>/dev/null &
  while is_running "$name"; do sleep 0.5; done
  sleep 1.5  # tail polls every second: let it print the run's last lines
  kill $! 2>/dev/null
  exit 0
fi
[ -f "$log" ] || fail "run $name has no log at $PWD/$log"
tail -n "$lines" -- "$log"
rc=$(cat ".enlace-remote/$name.exit" 2>/dev/null || echo unknown)
echo "[remote.sh] run $name is not running (exit code $rc)" >&2
EOF

cmd_logs() {
  local name="" lines=50
  while (($#)); do
    case $1 in
    -n) (($# >= 2)) && [[ $2 =~ ^[0-9]+$ ]] || usage_error "logs -n needs a number"; lines=$2; shift 2 ;;
    -*) usage_error "logs: unknown option $1" ;;
    *) [[ -z $name ]] || usage_error "logs takes one RUN"; name=$1; shift ;;
    esac
  done
  [[ -z $name ]] || valid_run_name "$name" || die 2 "logs: $name is not a run name ([A-Za-z0-9._-])"
  connect
  local tty=()
  [[ -t 0 && -t 1 ]] && tty=(-t) # Ctrl-C then reaches the remote tail, which ends with the pty
  local rc=0
  ssh "${tty[@]}" "${ssh_opts[@]}" "$target" "$(remote_command "$REMOTE_LOGS" "$name" "$lines")" || rc=$?
  ((rc == 255)) && die 1 "the connection to $target:$port failed or dropped (the run goes on)"
  return "$rc"
}

read -r -d '' REMOTE_STATUS <<'EOF' || true
shopt -s nullglob
files=(.enlace-remote/*.out_dir)
if ((${#files[@]} == 0)); then echo "status: no runs started with remote.sh in $PWD"; exit 0; fi
printf 'status: runs in %s:%s (oldest first)\n' "$(hostname)" "$PWD"
for f in $(ls -tr "${files[@]}"); do
  name=${f##*/}
  name=${name%.out_dir}
  out_dir=$(cat "$f")
  if is_running "$name"; then
    state="running (tmux session $(session_of "$name"))"
    [ -f ".enlace-remote/$name.stop_requested" ] && state="stopping (SIGTERM sent)"
  elif [ -f ".enlace-remote/$name.exit" ]; then
    rc=$(cat ".enlace-remote/$name.exit")
    state="finished (exit $rc)"
    [ -f ".enlace-remote/$name.stop_requested" ] && state="stopped (exit $rc)"
  else
    state="not running (no exit code: killed, or the machine restarted)"
  fi
  ckpt=$(latest_checkpoint "$out_dir")
  printf '%s  %s  %s  checkpoint: %s\n' "$name" "$state" "$out_dir" "${ckpt:-none}"
  last=$(tail -n 1 -- "$out_dir/metrics.jsonl" 2>/dev/null)
  printf '  last metrics: %s\n' "${last:-(none yet)}"
done
EOF

cmd_status() {
  (($# == 0)) || usage_error "status takes no arguments"
  connect
  remote "$REMOTE_STATUS"
}

read -r -d '' REMOTE_IS_RUNNING <<'EOF' || true
run_out_dir "$1" >/dev/null || exit 1
is_running "$1" || fail "run $1 is not running (scripts/remote.sh status)"
EOF

cmd_attach() {
  (($# == 1)) || usage_error "attach needs exactly one RUN"
  valid_run_name "$1" || die 2 "attach: $1 is not a run name ([A-Za-z0-9._-])"
  [[ -t 0 && -t 1 ]] || die 2 "attach needs a terminal; use scripts/remote.sh logs $1 to follow the output"
  connect
  remote "$REMOTE_IS_RUNNING" "$1"
  local session=${1//./_}
  echo "attach: tmux session $session; detach with Ctrl-b d (the run goes on)" >&2
  exec ssh -t "${ssh_opts[@]}" "$target" "tmux attach-session -t $(sq "=$session")"
}

read -r -d '' REMOTE_STOP <<'EOF' || true
name=$1 timeout=$2 wait=$3
out_dir=$(run_out_dir "$name") || exit 1
is_running "$name" || fail "run $name is not running (scripts/remote.sh status)"
pid=$(pane_pid "$name") || fail "cannot find the process of tmux session $(session_of "$name")"
pgid=$(ps -o pgid= -p "$pid" | tr -d ' ')
[[ $pgid =~ ^[0-9]+$ ]] || fail "cannot find the process group of pid $pid"
touch ".enlace-remote/$name.stop_requested"
kill -TERM -- "-$pgid" || fail "kill -TERM -$pgid failed"
echo "stop: sent SIGTERM to process group $pgid of run $name"
[ "$wait" = 1 ] || exit 0
echo "stop: waiting up to ${timeout}s for it to checkpoint and exit"
SECONDS=0
while is_running "$name"; do
  ((SECONDS >= timeout)) && fail "run $name is still running after ${timeout}s (scripts/remote.sh logs $name)"
  sleep 0.5
done
rc=$(cat ".enlace-remote/$name.exit" 2>/dev/null || echo unknown)
ckpt=$(latest_checkpoint "$out_dir")
echo "stop: run $name exited with code $rc after ${SECONDS}s; latest complete checkpoint: ${ckpt:-none}"
EOF

cmd_stop() {
  local name="" wait=1
  while (($#)); do
    case $1 in
    --no-wait) wait=0; shift ;;
    -*) usage_error "stop: unknown option $1" ;;
    *) [[ -z $name ]] || usage_error "stop takes one RUN"; name=$1; shift ;;
    esac
  done
  [[ -n $name ]] || usage_error "stop needs a RUN"
  valid_run_name "$name" || die 2 "stop: $name is not a run name ([A-Za-z0-9._-])"
  connect
  remote "$REMOTE_STOP" "$name" "$stop_timeout" "$wait"
}

read -r -d '' REMOTE_PULL_INFO <<'EOF' || true
out_dir=$(run_out_dir "$1") || exit 1
[ -d "$out_dir" ] || fail "run $1 has no output directory $PWD/$out_dir"
printf '%s\0%s\0' "$out_dir" "$(latest_checkpoint "$out_dir")"
EOF

cmd_pull() {
  local name="" dest="" report=0
  while (($#)); do
    case $1 in
    --to) (($# >= 2)) || usage_error "pull --to needs a DIR"; dest=$2; shift 2 ;;
    --report) report=1; shift ;;
    -*) usage_error "pull: unknown option $1" ;;
    *) [[ -z $name ]] || usage_error "pull takes one RUN"; name=$1; shift ;;
    esac
  done
  [[ -n $name ]] || usage_error "pull needs a RUN"
  valid_run_name "$name" || die 2 "pull: $name is not a run name ([A-Za-z0-9._-])"
  [[ -n $dest ]] || dest=$root/runs/$name
  connect
  local out_dir ckpt
  new_scratch
  remote "$REMOTE_PULL_INFO" "$name" >"$scratch/info" || exit 1
  { IFS= read -r -d '' out_dir && IFS= read -r -d '' ckpt; } <"$scratch/info" ||
    die 1 "pull: unexpected answer from the remote"
  local base
  if [[ $out_dir == /* ]]; then base=$out_dir; else base=$rdir/$out_dir; fi
  local files=(metrics.jsonl config.yaml train.log console.log) srcs=() f
  for f in "${files[@]}"; do srcs+=("$rsync_host:$base/./$f"); done
  [[ -n $ckpt ]] && srcs+=("$rsync_host:$base/./$ckpt")
  mkdir -p -- "$dest"
  local out rc=0
  out=$(rsync -az -s --relative --ignore-missing-args -e "$(rsync_rsh)" -- "${srcs[@]}" "$dest/" 2>&1) || rc=$?
  if ((rc)); then
    printf '%s\n' "$out" | tail -n 5 >&2
    die 1 "rsync from $target:$base failed (exit $rc)"
  fi
  local got=()
  for f in "${files[@]}"; do [[ -e $dest/$f ]] && got+=("$f"); done
  if [[ -n $ckpt ]]; then
    got+=("$ckpt (latest complete checkpoint)")
  else
    got+=("no complete checkpoint yet")
  fi
  local list
  list=$(printf '%s, ' "${got[@]}")
  printf 'pull: %s -> %s: %s\n' "$name" "$dest" "${list%, }"
  if ((report)); then  # the plots are drawn here, from the fetched metrics: the server needs nothing
    (cd "$root" && uv run -q enlace-train report "$dest" --out "$dest/report") ||
      die 1 "pull: the report of $dest could not be built"
  fi
}

# ---------------------------------------------------------------------------------------------
main() {
  (($#)) || usage_error "missing VERB"
  local verb=$1
  shift
  case $verb in
  -h | --help | help) usage; exit 0 ;;
  sync | setup | run | logs | status | attach | stop | pull) ;;
  *) usage_error "unknown verb $verb" ;;
  esac
  command -v ssh >/dev/null 2>&1 || die 2 "ssh is not installed (scripts/install-system-deps.sh)"
  if [[ $verb == sync || $verb == pull ]]; then
    command -v rsync >/dev/null 2>&1 || die 2 "rsync is not installed (scripts/install-system-deps.sh)"
  fi
  load_settings
  "cmd_$verb" "$@"
}

main "$@"
