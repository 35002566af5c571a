"""`enlace-assistant doctor | service … | model …`: the home server as a system (README, «Servidor
doméstico»). Exit codes: 0 fine, 1 something needs a person (doctor) or the action failed, 2 bad
usage or configuration. Only the standard library is imported before the arguments are read."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from enlace_agent.cli.common import EXIT_FAILED, EXIT_OK, Parser, fail, run_guarded

if TYPE_CHECKING:
    from enlace_config.schema.agent import AssistantConfig

    from enlace_agent.search.chain import SearchChain

COMMANDS = ("doctor",)
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
        epilog="Ejemplo: enlace-assistant doctor",
    )
    for sub in (doctor,):
        add_common(sub)
    return parser


def add_common(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--config", type=Path, metavar="RUTA", help="fichero assistant.yaml")
    sub.add_argument("--env-file", type=Path, metavar="RUTA", help="fichero .env con las claves")
    sub.add_argument("--debug", action="store_true", help="registro detallado y trazas")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    run = {"doctor": _doctor}[args.command]
    return run_guarded("enlace-assistant", args, run)


def _settings(args: argparse.Namespace) -> tuple[AssistantConfig, dict[str, str]] | str:
    from enlace_agent.assistant import load_config
    from enlace_agent.settings import SettingsError, load_env

    try:
        return load_config(args.config), load_env(args.env_file)
    except SettingsError as exc:
        return f"configuración no válida.\n{exc}"


def search_chain(config: AssistantConfig, env: Mapping[str, str]) -> SearchChain | None:
    """The chain the assistant would build (None: search off), or `SearchUnavailable`."""
    from enlace_agent.assistant.setup import search_file
    from enlace_agent.cli.search import missing_key_message, only_duckduckgo_in
    from enlace_agent.health import SearchUnavailable
    from enlace_agent.search.chain import SearchChain
    from enlace_agent.search.errors import MissingCredential
    from enlace_agent.search.settings import load_config as load_search_config
    from enlace_agent.settings import SettingsError, settings_file

    if config.max_tool_rounds == 0:
        return None
    try:
        return SearchChain(load_search_config(search_file(config), environ=env), env=env)
    except MissingCredential as exc:
        file = settings_file("search.yaml", search_file(config), env)
        why = missing_key_message(exc.provider, exc.env_var, env, only_duckduckgo_in(file))
        raise SearchUnavailable(why) from None
    except SettingsError as exc:
        raise SearchUnavailable(f"search.yaml no es válido. {exc}") from None


def database_path(config: AssistantConfig, env: Mapping[str, str]) -> Path:
    from enlace_agent.web.store import default_path

    return Path(config.web.database) if config.web.database else default_path(env)


def _doctor(args: argparse.Namespace, secrets: list[str]) -> int:
    from enlace_agent.health import needs_person, run_checks
    from enlace_agent.search.models import redact

    settings = _settings(args)
    if isinstance(settings, str):
        return fail(settings)
    config, env = settings
    secrets.extend(v for k, v in env.items() if v and ("KEY" in k or "TOKEN" in k))
    checks = run_checks(config, env, database_path(config, env), lambda: search_chain(config, env))
    for check in checks:
        line = " ".join(check.message.split())  # one line each
        sys.stdout.write(f"{MARKS[check.status]} {redact(line, secrets)}\n")
    if needs_person(checks):
        sys.stdout.write("Algo necesita atención: sigue la solución de las líneas con ✗.\n")
        return EXIT_FAILED
    return EXIT_OK
