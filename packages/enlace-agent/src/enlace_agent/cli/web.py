"""`enlace-assistant serve | export-history | delete-history | end-sessions`: the family web page,
the histories it keeps and its sign-ins. Exit codes: 0 done, 1 the server could not run, 2 bad
usage or configuration.
Starlette and uvicorn (the `web` extra) are imported only once the arguments are read."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from enlace_agent.cli.common import (
    DEBUG_HELP,
    EXIT_FAILED,
    EXIT_OK,
    Parser,
    examples,
    fail,
    open_store,
    run_guarded,
    write_private,
)
from enlace_agent.cli.options import add_assistant_options, setup_assistant

if TYPE_CHECKING:
    pass

NO_EXTRA = (
    'la página web necesita el extra «web»: pip install "enlace-agent[web]" (Starlette y uvicorn).'
)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="enlace-assistant",
        description="La página web del asistente familiar y el historial de cada persona.",
        epilog="Códigos de salida: 0 hecho, 1 el servidor no pudo funcionar, 2 uso o "
        "configuración incorrectos. La sección web de assistant.yaml dice quién usa la página "
        "(web.people) y dónde escucha.",
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    serve = commands.add_parser(
        "serve",
        help="sirve la página (127.0.0.1:8765 por defecto)",
        epilog=examples("enlace-assistant serve", "enlace-assistant serve --port 8080"),
    )
    serve.add_argument("--host", metavar="DIRECCIÓN", help="dirección donde escuchar")
    serve.add_argument("--port", type=int, metavar="PUERTO", help="puerto donde escuchar")
    add_assistant_options(serve)
    export = commands.add_parser(
        "export-history",
        help="el historial de una persona en JSON",
        epilog=examples("enlace-assistant export-history Ana --out ana.json"),
    )
    export.add_argument("name", metavar="NOMBRE")
    export.add_argument("--out", type=Path, metavar="RUTA", help="fichero (por defecto, stdout)")
    delete = commands.add_parser(
        "delete-history",
        help="borra el historial de una persona",
        epilog=examples("enlace-assistant delete-history Ana --yes"),
    )
    delete.add_argument("name", metavar="NOMBRE")
    delete.add_argument("--yes", action="store_true", help="confirma el borrado")
    end = commands.add_parser(
        "end-sessions",
        help="cierra las sesiones de una persona en todos sus dispositivos",
        description="Cierra al momento todas las sesiones abiertas de una persona (también con "
        "la página en marcha): tendrá que volver a entrar. Al cambiar su clave (token_env) sus "
        "sesiones ya se cierran solas al reiniciar la página; esto sirve, por ejemplo, para un "
        "móvil perdido. El historial no se toca.",
        epilog=examples("enlace-assistant end-sessions Ana"),
    )
    end.add_argument("name", metavar="NOMBRE")
    for sub in (export, delete, end):
        sub.add_argument("--config", type=Path, metavar="RUTA", help="fichero assistant.yaml")
        sub.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    run = {
        "serve": _serve,
        "export-history": _export,
        "delete-history": _delete,
        "end-sessions": _end_sessions,
    }[args.command]
    return run_guarded("enlace-assistant", args, run)


def _serve(args: argparse.Namespace, secrets: list[str]) -> int:
    try:
        import uvicorn

        from enlace_agent.web import StoreError, WebSetupError, build_app, resolve_tokens
        from enlace_agent.web.guard import WILDCARD_HOSTS
    except ImportError:
        return fail(NO_EXTRA)
    from enlace_agent.household import HouseholdPaths
    from enlace_agent.settings import InvalidOptions, with_overrides

    built = setup_assistant(args, secrets)
    if isinstance(built, str):
        return fail(built)
    assistant, env = built
    try:
        web = with_overrides(assistant.config.web, {"host": args.host, "port": args.port})
        assistant.config = assistant.config.model_copy(update={"web": web})
        secrets.extend(t for t in resolve_tokens(web, env).values() if t)
        paths = HouseholdPaths.of(assistant.config, env, args.config)
        app = build_app(assistant, env, paths)
    except InvalidOptions as exc:
        flags = ", ".join(f"--{k}" if k in ("host", "port") else f"web.{k}" for k in exc.keys)
        return fail(f"opción no válida: {flags}.\n{exc}")
    except WebSetupError as exc:
        return fail(str(exc))
    except StoreError as exc:
        return fail(f"no se puede usar el historial: {exc}.")
    url_host = f"[{web.host}]" if ":" in web.host else web.host  # an IPv6 address
    if web.host in WILDCARD_HOSTS:  # the page answers only to its own addresses and names
        sys.stderr.write(
            f"Enlace: la página escucha en todas las direcciones de este equipo: ábrela con "
            f"http://DIRECCIÓN-DEL-EQUIPO:{web.port}/ (aquí, http://127.0.0.1:{web.port}/); "
            "un nombre como casa.local, en web.allowed_hosts\n"
        )
    else:
        sys.stderr.write(f"Enlace: la página está en http://{url_host}:{web.port}/\n")
    from enlace_agent.snapshot import household, start_daily

    refused = _cannot_listen(web.host, web.port)  # uvicorn would only log it, in English
    if refused:
        return fail(refused, EXIT_FAILED)
    start_daily(household(assistant.config, env, paths=paths))  # daily snapshots (daemon thread)
    # The service's journal: a line per request and per tool call, the snapshots' own lines and
    # failures (ERROR); the warnings only with --debug.
    for name in ("enlace_agent.web.access", "enlace_agent.assistant.tools"):
        logging.getLogger(name).setLevel(logging.INFO)
    logging.getLogger("enlace_agent.snapshot").setLevel(logging.WARNING)
    if not args.debug:
        logging.getLogger().setLevel(logging.ERROR)
    try:
        uvicorn.run(
            app,
            host=web.host,
            port=web.port,
            log_config=None,
            access_log=False,
            # then the answers still being written are saved and marked (the app's lifespan)
            timeout_graceful_shutdown=web.shutdown_grace_s,  # pyright: ignore[reportArgumentType]
        )
    except OSError as exc:
        return fail(_listen_error(web.host, web.port, exc), EXIT_FAILED)
    return EXIT_OK


def _cannot_listen(host: str, port: int) -> str | None:
    """Why the page could not listen on host:port (a trial bind, as uvicorn binds), in Spanish;
    None when it can."""
    import socket

    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        with socket.socket(family, kind, proto) as trial:
            trial.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            trial.bind(address)
    except OSError as exc:
        return _listen_error(host, port, exc)
    return None


def _listen_error(host: str, port: int, exc: OSError) -> str:
    import errno
    import socket

    from enlace_agent.settings import os_reason

    if exc.errno == errno.EADDRINUSE:
        why = (
            f"el puerto {port} ya está en uso (¿la página ya está en marcha?): cierra el otro "
            "programa o elige otro puerto con --port"
        )
    elif exc.errno in (errno.EACCES, errno.EPERM):
        why = (
            f"no hay permiso para usar el puerto {port} (pasa con los menores de 1024): usa --port"
        )
    elif exc.errno == errno.EADDRNOTAVAIL or isinstance(exc, socket.gaierror):
        why = f"«{host}» no es una dirección de este equipo: corrige --host o web.host"
    else:
        why = os_reason(exc)
    return f"no se puede escuchar en {host}:{port}: {why}."


def _store(args: argparse.Namespace) -> Any:
    """The history store named by the configuration, or the Spanish reason it cannot be used."""
    from enlace_agent.assistant import load_config
    from enlace_agent.settings import SettingsError

    try:
        config = load_config(args.config)
    except SettingsError as exc:
        return f"configuración no válida.\n{exc}"
    return open_store(config.web, dict(os.environ))


def _export(args: argparse.Namespace, secrets: list[str]) -> int:
    store = _store(args)
    if isinstance(store, str):
        return fail(store)
    from enlace_config.schema.agent import MemoryConfig

    from enlace_agent.memory import MemoryStore

    exported = store.export(args.name)
    memories = MemoryStore(store, MemoryConfig()).export(args.name)
    exported["memories"] = [m for m in memories if m["scope"] == "personal"]  # not the home's
    text = json.dumps(exported, ensure_ascii=False, indent=2) + "\n"
    if args.out is None:
        sys.stdout.write(text)
    else:
        if (problem := write_private(args.out, text)) is not None:
            return fail(problem)
        sys.stderr.write(
            f"Historial de {args.name} guardado en {args.out} (solo tu usuario puede leerlo)\n"
        )
    return EXIT_OK


def _delete(args: argparse.Namespace, secrets: list[str]) -> int:
    if not args.yes:
        return fail(
            f"borrar el historial de {args.name} no se puede deshacer: repite con --yes "
            "(y antes, si quieres, guárdalo con export-history)."
        )
    store = _store(args)
    if isinstance(store, str):
        return fail(store)
    count = store.delete_person(args.name)
    sys.stderr.write(f"Borradas {count} conversaciones de {args.name} (y sus sesiones).\n")
    return EXIT_OK


def _end_sessions(args: argparse.Namespace, secrets: list[str]) -> int:
    store = _store(args)
    if isinstance(store, str):
        return fail(store)
    count = store.end_sessions(args.name)
    sys.stderr.write(
        f"Sesiones cerradas de {args.name}: {count}. Para usar la página tendrá que entrar de "
        "nuevo.\n"
    )
    return EXIT_OK
