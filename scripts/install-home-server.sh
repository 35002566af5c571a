#!/usr/bin/env bash
# The home server from a clone, in one command (README, «Servidor doméstico»): on a Debian or
# Ubuntu machine without a GPU,
#
#   git clone <repositorio> enlace && enlace/scripts/install-home-server.sh enlace-chat-q8_0.gguf
#
# installs what it needs from the system's packages (python3-venv; cmake, g++ and make to build
# llama.cpp), the torch-free agent with its web extra in its own virtual environment (the versions
# in uv.lock), llama-server (scripts/build-llama-server.sh, once per version), the settings (the
# family's names with a generated access key each; the Brave Search key, or a DuckDuckGo-only
# chain, saying what that loses), the model file as a version (`enlace-assistant model install`),
# and the two systemd user services (`enlace-assistant service install`, which refuses units that
# could not start). Running it again changes nothing and says so, step by step.
#
#   --dry-run   everything but the services, whose units are printed instead
#
# Environment (for scripted installs and the tests): ENLACE_HOME_VENV (the virtual environment;
# default ~/.local/share/enlace/venv), ENLACE_PEOPLE ("Ana,Luis": no question asked),
# ENLACE_BRAVE_KEY (empty: DuckDuckGo only, no question asked), ENLACE_LLAMA_SERVER (a
# llama-server already built: no build).
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf 'enlace: %s\n' "$*"; }
die() { printf 'enlace: error: %s\n' "$1" >&2; exit "${2:-1}"; }

dry_run=() model=""
for arg in "$@"; do
  case $arg in
    --dry-run) dry_run=(--dry-run) ;;
    -h | --help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "opción desconocida: $arg (--dry-run, --help)" 2 ;;
    *) model=$arg ;;
  esac
done

# 1. What the system must provide.
need=()
command -v python3 >/dev/null 2>&1 || need+=(python3)
python3 -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)
if [ -z "${ENLACE_LLAMA_SERVER:-}" ]; then
  for tool in cmake g++ make; do command -v "$tool" >/dev/null 2>&1 || need+=("$tool"); done
fi
if [ ${#need[@]} -gt 0 ]; then
  command -v apt-get >/dev/null 2>&1 ||
    die "faltan ${need[*]} y este sistema no tiene apt-get: instálalos con su gestor de paquetes."
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  say "instalando los paquetes del sistema que faltan: ${need[*]}"
  "${sudo[@]}" apt-get update -q && "${sudo[@]}" apt-get install -y -q "${need[@]}"
else
  say "paquetes del sistema: ya están"
fi

# 2. The agent (torch-free, with the page) in its own virtual environment, at uv.lock's versions.
data="${XDG_DATA_HOME:-$HOME/.local/share}/enlace"
venv="${ENLACE_HOME_VENV:-$data/venv}"
if ! command -v uv >/dev/null 2>&1; then  # uv from the package registry, in a folder of its own
  [ -x "$data/uv/bin/uv" ] || { python3 -m venv "$data/uv" && "$data/uv/bin/pip" install -q uv; }
  PATH="$data/uv/bin:$PATH"
fi
installed() {  # what runs: the pinned versions and the bytes of Enlace's own modules (a pull that
  # changes the code without a version bump is an upgrade too; the packages' cache-keys rebuild it)
  uv pip freeze -q --python "$venv/bin/python" 2>/dev/null || true
  find "$venv" -path '*/site-packages/enlace_*' -type f -name '*.py' -exec sha256sum {} + 2>/dev/null |
    sort || true  # no venv yet: nothing installed
}
before=$(installed)
UV_PROJECT_ENVIRONMENT="$venv" uv sync -q --frozen --package enlace-agent --extra web --no-dev \
  --no-editable
after=$(installed)
if [ "$before" = "$after" ]; then say "enlace-agent: ya instalado en $venv"; else say "enlace-agent: instalado en $venv"; fi
enlace=("$venv/bin/python" -m enlace_agent.cli.assistant)

# 3. llama-server, built once per version (then it comes from ~/.cache/enlace).
llama="${ENLACE_LLAMA_SERVER:-$(scripts/build-llama-server.sh)}"
[ -x "$llama" ] || die "llama-server no está en $llama."
say "llama-server: $llama"

# 4. The settings: written once, never overwritten.
conf="${XDG_CONFIG_HOME:-$HOME/.config}/enlace"
mkdir -p -m 700 "$conf"
touch "$conf/.env" && chmod 600 "$conf/.env"
if [ -f "$conf/assistant.yaml" ]; then
  say "ajustes: $conf/assistant.yaml ya existe, no lo toco"
else
  people="${ENLACE_PEOPLE-}"
  if [ -z "$people" ] && [ -t 0 ]; then
    read -r -p "¿Quién usará la página? (nombres separados por comas): " people
  fi
  [ -n "$people" ] || die "hace falta al menos un nombre (ENLACE_PEOPLE=\"Ana,Luis\" o respóndelo)." 2
  "$venv/bin/python" - "$conf" "$people" "$llama" <<'PY'
import json, secrets, sys
from pathlib import Path

conf, names, llama = Path(sys.argv[1]), [n.strip() for n in sys.argv[2].split(",")], sys.argv[3]
people, keys = [], []
for i, name in enumerate((n for n in names if n), 1):
    people.append({"name": name, "token_env": f"ENLACE_WEB_TOKEN_{i}"})
    keys.append((name, f"ENLACE_WEB_TOKEN_{i}", secrets.token_urlsafe(18)))
with (conf / ".env").open("a", encoding="utf-8") as env:
    env.writelines(f"{var}={key}\n" for _, var, key in keys)
web = {"host": "0.0.0.0", "people": people, "home": {"llama_server": llama}}
(conf / "assistant.yaml").write_text(
    "# Escrito por scripts/install-home-server.sh; configs/agent/assistant.yaml documenta cada "
    "clave.\n" + json.dumps({"web": web}, ensure_ascii=False, indent=2) + "\n",
    encoding="utf-8",
)
print(f"enlace: ajustes escritos en {conf / 'assistant.yaml'}; la clave de acceso de cada")
print(f"        persona (guárdala; también está en {conf / '.env'}):")
for name, _, key in keys:
    print(f"          {name}: {key}")
PY
fi
if [ -f "$conf/search.yaml" ] || grep -q '^BRAVE_SEARCH_API_KEY=' "$conf/.env"; then
  say "búsqueda: ya configurada"
else
  key="${ENLACE_BRAVE_KEY-}"
  if [ -z "${ENLACE_BRAVE_KEY+set}" ] && [ -t 0 ]; then
    read -r -s -p "Clave de Brave Search (Intro para buscar solo con DuckDuckGo): " key
    echo
  fi
  if [ -n "$key" ]; then
    printf 'BRAVE_SEARCH_API_KEY=%s\n' "$key" >>"$conf/.env"
    say "búsqueda: DuckDuckGo y, si falla, Brave Search (clave guardada en $conf/.env)"
  else
    printf '# Escrito por scripts/install-home-server.sh: sin clave de Brave Search.\nproviders: [duckduckgo]\n' >"$conf/search.yaml"
    say "búsqueda: solo DuckDuckGo. Se pierde el respaldo: cuando DuckDuckGo bloquea o falla, la"
    say "  pregunta se responde sin buscar. Para añadirlo: BRAVE_SEARCH_API_KEY=... en $conf/.env"
    say "  y borra $conf/search.yaml"
  fi
fi

# 5. The model, as a version the model service serves.
if [ -n "$model" ]; then
  "${enlace[@]}" model install "$model" --use --no-restart | sed 's/^/enlace: /'
elif ! "${enlace[@]}" model list | grep -q '^\*'; then
  die "falta el modelo: scripts/install-home-server.sh RUTA/modelo.gguf" 2
else
  say "modelo: ya hay uno en uso"
fi

# 6. The services (they refuse to be installed if they could not start).
"${enlace[@]}" service install "${dry_run[@]}"
if [ ${#dry_run[@]} -eq 0 ]; then
  if [ "$before" != "$after" ]; then  # an upgrade: the page restarts on the new code (its history
    systemctl --user try-restart enlace-web.service  # is migrated after a snapshot at start-up)
  fi
  "${enlace[@]}" service wait && "${enlace[@]}" doctor
fi
