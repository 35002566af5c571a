"""`enlace-assistant doctor | service … | model …`: the home server as a system (README, «Servidor
doméstico»). Exit codes: 0 fine, 1 something needs a person (doctor) or the action failed, 2 bad
usage or configuration. Only the standard library is imported before the arguments are read."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from enlace_agent.cli.common import (
    DEBUG_HELP,
    EXIT_FAILED,
    EXIT_OK,
    Parser,
    examples,
    fail,
    household_settings,
    run_guarded,
)

if TYPE_CHECKING:
    from enlace_config.schema.agent import AssistantConfig

    from enlace_agent.household import HouseholdPaths
    from enlace_agent.search.chain import SearchChain

MARKS = {"ok": "✓", "warn": "!", "fail": "✗"}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="enlace-assistant",
        description="El servidor doméstico como sistema: su salud, sus servicios y sus modelos.",
        epilog="Códigos de salida: 0 todo bien, 1 algo necesita a una persona, 2 uso o "
        "configuración incorrectos.",
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    doctor = commands.add_parser(
        "doctor",
        help="revisa el servidor: modelo, búsqueda, historial, disco y copias",
        description="Una línea por comprobación, con la solución cuando algo falla. Sale con "
        "código 1 si algo necesita a una persona.",
        epilog=examples("enlace-assistant doctor"),
    )
    service = commands.add_parser(
        "service",
        help="los servicios que arrancan con el equipo (systemd, del usuario)",
        description="Escribe, quita o muestra los servicios de systemd del usuario: "
        "enlace-model (llama-server) y enlace-web (la página, cuando el modelo ya responde).",
        epilog=examples(
            "enlace-assistant service install --dry-run",
            "enlace-assistant service install",
            "enlace-assistant service status",
            "enlace-assistant service remove",
        ),
    )
    actions = service.add_subparsers(dest="action", required=True, parser_class=Parser)
    s_install = actions.add_parser(
        "install",
        help="escribe los servicios y los arranca",
        epilog=examples("enlace-assistant service install --dry-run"),
    )
    s_install.add_argument("--dry-run", action="store_true", help="solo muestra los servicios")
    s_install.add_argument(
        "--no-start", action="store_true", help="los escribe sin llamar a systemctl"
    )
    s_remove = actions.add_parser(
        "remove", help="los para y los quita", epilog=examples("enlace-assistant service remove")
    )
    s_remove.add_argument("--no-start", action="store_true", help="sin llamar a systemctl")
    s_status = actions.add_parser(
        "status",
        help="si están instalados y en marcha",
        epilog=examples("enlace-assistant service status"),
    )
    s_wait = actions.add_parser(
        "wait",
        help="espera a que el servidor del modelo responda",
        epilog=examples("enlace-assistant service wait"),
    )
    model = commands.add_parser(
        "model",
        help="las versiones del modelo: install, list, use, rollback",
        description="Instala ficheros GGUF como versiones, elige cuál sirve el servidor del "
        "modelo y vuelve a la anterior.",
        epilog=examples(
            "enlace-assistant model install enlace-chat-q8_0.gguf",
            "enlace-assistant model list",
            "enlace-assistant model use NOMBRE",
            "enlace-assistant model rollback",
        ),
    )
    versions = model.add_subparsers(dest="action", required=True, parser_class=Parser)
    m_install = versions.add_parser(
        "install",
        help="copia un GGUF como nueva versión",
        epilog=examples("enlace-assistant model install enlace-chat-q8_0.gguf --use"),
    )
    m_install.add_argument("file", type=Path, metavar="FICHERO.gguf")
    m_install.add_argument("--name", metavar="NOMBRE", help="nombre de la versión")
    m_install.add_argument("--use", action="store_true", help="y pasa a usarla")
    m_list = versions.add_parser(
        "list", help="las versiones instaladas", epilog=examples("enlace-assistant model list")
    )
    m_use = versions.add_parser(
        "use",
        help="pasa a servir otra versión",
        epilog=examples("enlace-assistant model use enlace-chat-v2"),
    )
    m_use.add_argument("name", metavar="NOMBRE")
    m_back = versions.add_parser(
        "rollback",
        help="vuelve a la versión anterior",
        epilog=examples("enlace-assistant model rollback"),
    )
    for sub in (m_install, m_use, m_back):
        sub.add_argument(
            "--no-restart", action="store_true", help="no reinicia el servicio del modelo"
        )
    for sub in (doctor, s_install, s_remove, s_status, s_wait, m_install, m_list, m_use, m_back):
        add_common(sub)
    return parser


def add_common(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--config", type=Path, metavar="RUTA", help="fichero assistant.yaml")
    sub.add_argument("--env-file", type=Path, metavar="RUTA", help="fichero .env con las claves")
    sub.add_argument("--debug", action="store_true", help=DEBUG_HELP)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    run = {"doctor": _doctor, "service": _service, "model": _model}[args.command]
    return run_guarded("enlace-assistant", args, run)


def search_chain(config: AssistantConfig, env: Mapping[str, str]) -> SearchChain | None:
    """The chain the assistant would build (None: search off), or `SearchUnavailable`."""
    from enlace_agent.assistant.setup import search_chain as build
    from enlace_agent.cli.options import missing_search_key
    from enlace_agent.health import SearchUnavailable
    from enlace_agent.search.errors import MissingCredential
    from enlace_agent.settings import SettingsError

    try:
        return build(config, env)
    except MissingCredential as exc:
        raise SearchUnavailable(missing_search_key(exc, config, env)) from None
    except SettingsError as exc:
        raise SearchUnavailable(f"search.yaml no es válido. {exc}") from None


def _doctor(args: argparse.Namespace, secrets: list[str]) -> int:
    from enlace_agent.health import needs_person, run_checks
    from enlace_agent.shared import redact

    settings = household_settings(args)
    if isinstance(settings, str):
        return fail(settings)
    config, env, paths = settings
    secrets.extend(v for k, v in env.items() if v and ("KEY" in k or "TOKEN" in k))
    checks = run_checks(config, env, paths, lambda: search_chain(config, env))
    for check in checks:
        line = " ".join(check.message.split())  # one line each
        sys.stdout.write(f"{MARKS[check.status]} {redact(line, secrets)}\n")
    if needs_person(checks):
        sys.stdout.write("Algo necesita atención: sigue la solución de las líneas con ✗.\n")
        return EXIT_FAILED
    return EXIT_OK


# ---------------------------------------------------------------- service
def _systemctl(*args: str) -> str | None:
    """Runs `systemctl --user ARGS`; the Spanish reason when it fails (None: done)."""
    import shutil
    import subprocess

    if shutil.which("systemctl") is None:
        return "este equipo no tiene systemctl (systemd): arranca los servicios a mano."
    done = subprocess.run(["systemctl", "--user", *args], capture_output=True, text=True)
    if done.returncode != 0:
        said = " ".join((done.stderr or done.stdout).split())
        return f"«systemctl --user {' '.join(args)}» falló: {said}"
    return None


def _service(args: argparse.Namespace, secrets: list[str]) -> int:
    from enlace_agent import service

    settings = household_settings(args)
    if isinstance(settings, str):
        return fail(settings)
    config, env, paths = settings
    if args.action == "wait":
        timeout = config.web.home.model_ready_timeout_s
        if service.wait_for_model(config.base_url, timeout):
            return EXIT_OK
        return fail(
            f"el servidor del modelo no respondió en {timeout:g} s: mira «journalctl --user -u "
            f"{service.MODEL_UNIT}».",
            EXIT_FAILED,
        )
    folder = paths.units
    if args.action == "status":
        for name in service.UNITS:
            there = "instalado" if (folder / name).is_file() else "no instalado"
            sys.stdout.write(f"{name}: {there}\n")
        why = _systemctl("--no-pager", "status", *service.UNITS)
        if why is not None:
            sys.stdout.write(f"(estado en systemd desconocido: {why})\n")
        return EXIT_OK
    if args.action == "remove":
        if not args.no_start:
            _systemctl("disable", "--now", *service.UNITS)  # best effort: maybe never started
        removed = service.remove_units(folder)
        sys.stdout.write(
            f"Servicios quitados: {', '.join(removed)}.\n" if removed else "No había servicios.\n"
        )
        return EXIT_OK
    try:
        plan = service.plan(config, paths, env)
    except service.ServiceError as exc:
        return fail(str(exc))
    if args.dry_run:
        for name, text in plan.units.items():
            sys.stdout.write(f"# {plan.folder / name}\n{text}\n")
    problem = _cannot_start(config, env, paths, secrets)
    if problem is not None:
        return fail(f"no instalo unos servicios que no podrían arrancar: {problem}")
    if args.dry_run:
        return EXIT_OK
    changed = service.write_units(plan)
    if not changed:
        sys.stdout.write(
            f"Los servicios ya estaban instalados y al día en {plan.folder}: nada cambia.\n"
        )
    else:
        sys.stdout.write(f"Servicios escritos en {plan.folder}: {', '.join(changed)}.\n")
    if args.no_start:
        return EXIT_OK
    for step in (
        ("daemon-reload",),
        ("enable", *service.UNITS),
        ("restart" if changed else "start", *service.UNITS),
    ):
        why = _systemctl(*step)
        if why is not None:
            return fail(why, EXIT_FAILED)
    sys.stdout.write(
        "En marcha. Para que arranquen con el equipo sin iniciar sesión: "
        "«sudo loginctl enable-linger $USER» (una vez).\n"
    )
    return EXIT_OK


def _cannot_start(
    config: AssistantConfig, env: Mapping[str, str], paths: HouseholdPaths, secrets: list[str]
) -> str | None:
    """Why the units could not start as configured (Spanish), or None."""
    import os

    from enlace_agent import service
    from enlace_agent.health import SearchUnavailable
    from enlace_agent.household import WebSetupError, resolve_tokens
    from enlace_agent.model_versions import CURRENT

    binary = service.llama_server(config, paths)
    if not os.access(binary, os.X_OK):
        return f"{binary} no existe o no se puede ejecutar (scripts/build-llama-server.sh)."
    if not (paths.models / CURRENT).exists():
        return "no hay ningún modelo elegido: «enlace-assistant model install FICHERO.gguf --use»."
    try:
        search_chain(config, env)
    except SearchUnavailable as exc:
        return str(exc)
    import importlib.util

    if importlib.util.find_spec("starlette") is None:  # the page's unit runs `serve`
        return 'la página necesita el extra «web»: pip install "enlace-agent[web]".'
    try:
        secrets.extend(t for t in resolve_tokens(config.web, env).values() if t)
    except WebSetupError as exc:
        return str(exc)
    return None


# ---------------------------------------------------------------- model versions
def _model(args: argparse.Namespace, secrets: list[str]) -> int:
    from enlace_agent import model_versions as mv
    from enlace_agent import service

    settings = household_settings(args)
    if isinstance(settings, str):
        return fail(settings)
    _, _, paths = settings
    folder = paths.models
    try:
        if args.action == "list":
            found = mv.versions(folder)
            if not found:
                sys.stdout.write(
                    "No hay versiones instaladas: enlace-assistant model install FICHERO.gguf\n"
                )
            for v in found:
                mark = "*" if v.current else " "
                named = v.metadata.get("general.name", "?")
                sys.stdout.write(
                    f"{mark} {v.name}  ({named}, {v.size / 2**20:.0f} MiB, instalada {v.installed}, "
                    f"sha256 {v.sha256[:12]}…)\n"
                )
            return EXIT_OK
        if args.action == "install":
            known = {v.name for v in mv.versions(folder)}
            version = mv.install(folder, args.file, args.name)
            if version.name in known:
                sys.stdout.write(
                    f"Ese fichero ya estaba instalado: es la versión {version.name}.\n"
                )
            else:
                sys.stdout.write(
                    f"Instalada la versión {version.name} (sha256 {version.sha256}).\n"
                )
            if not args.use:
                sys.stdout.write(f"Para usarla: enlace-assistant model use {version.name}\n")
                return EXIT_OK
            version = mv.use(folder, version.name)
        elif args.action == "use":
            version = mv.use(folder, args.name)
        else:
            version = mv.rollback(folder)
    except mv.ModelRefused as exc:
        return fail(str(exc))
    sys.stdout.write(f"El servidor del modelo sirve ahora la versión {version.name}.\n")
    if not args.no_restart and (paths.units / service.MODEL_UNIT).is_file():
        why = _systemctl("restart", service.MODEL_UNIT)
        if why is not None:
            return fail(why, EXIT_FAILED)
        sys.stdout.write("Servicio del modelo reiniciado: la página responde en cuanto cargue.\n")
    return EXIT_OK
