"""`enlace-assistant memory list | add | forget | export | import | pause | resume`: what Enlace
remembers of one person and of the household, from the terminal (the page's «Lo que Enlace
recuerda»). Exit codes: 0 done, 2 bad usage, input or configuration (an import with bad lines
names each one and imports nothing). Standard library only until the arguments are read."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from enlace_agent.cli.common import (
    DEBUG_HELP,
    EXIT_OK,
    EXITS_DONE,
    Parser,
    examples,
    fail,
    household_settings,
    run_guarded,
    write_private,
)

if TYPE_CHECKING:
    from enlace_config.schema.agent import AssistantConfig

    from enlace_agent.memory import Memory, MemoryStore

SOURCES_ES = {"page": "página", "cli": "terminal", "assistant": "asistente", "import": "importado"}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="enlace-assistant memory",
        description="Lo que Enlace recuerda de cada persona y de la familia: verlo, añadir, "
        "olvidar, exportar e importar (lo mismo que «Lo que Enlace recuerda» en la página).",
        epilog=EXITS_DONE
        + "\n\n"
        + examples("enlace-assistant memory list Ana", "enlace-assistant memory forget Ana 12"),
    )
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    class Commands:  # every command: NOMBRE first, then its own arguments, then the common ones
        @staticmethod
        def add_parser(name: str, **kwargs: Any) -> argparse.ArgumentParser:
            sub = subparsers.add_parser(name, **kwargs)
            sub.add_argument("name", metavar="NOMBRE", help="la persona (una de web.people)")
            sub.add_argument("--config", type=Path, metavar="RUTA", help="fichero assistant.yaml")
            sub.add_argument("--env-file", type=Path, metavar="RUTA", help="fichero .env")
            sub.add_argument("--debug", action="store_true", help=DEBUG_HELP)
            return sub

    commands = Commands()
    listing = commands.add_parser(
        "list",
        help="los recuerdos de una persona y los de la familia",
        epilog=examples(
            "enlace-assistant memory list Ana", "enlace-assistant memory list Ana --json"
        ),
    )
    listing.add_argument("--json", action="store_true", help="salida JSON")
    add = commands.add_parser(
        "add",
        help="añade un recuerdo",
        epilog=examples(
            "enlace-assistant memory add Ana 'Ana es alérgica a los frutos secos'",
            "enlace-assistant memory add Ana 'La abuela vive en Soria' --familia",
        ),
    )
    add.add_argument("text", metavar="TEXTO")
    add.add_argument("--familia", action="store_true", help="un recuerdo de toda la familia")
    forget = commands.add_parser(
        "forget",
        help="olvida recuerdos por su número (#) o todos los de la persona",
        epilog=examples(
            "enlace-assistant memory forget Ana 12",
            "enlace-assistant memory forget Ana --all --yes",
        ),
    )
    forget.add_argument("ids", metavar="NÚMERO", nargs="*", type=int)
    forget.add_argument("--all", action="store_true", help="todos los recuerdos personales")
    forget.add_argument("--yes", action="store_true", help="confirma --all")
    export = commands.add_parser(
        "export",
        help="los recuerdos en JSON, uno por línea",
        epilog=examples("enlace-assistant memory export Ana --out ana-recuerdos.jsonl"),
    )
    export.add_argument("--out", type=Path, metavar="RUTA", help="fichero (por defecto, stdout)")
    load = commands.add_parser(
        "import",
        help="añade los recuerdos de un fichero de export (comprueba cada línea antes)",
        epilog=examples("enlace-assistant memory import Ana ana-recuerdos.jsonl"),
    )
    load.add_argument("file", metavar="FICHERO", help="el fichero, o - para la entrada estándar")
    commands.add_parser(
        "pause",
        help="pausa la memoria de una persona: no se lee ni se guarda nada",
        epilog=examples("enlace-assistant memory pause Ana"),
    )
    commands.add_parser(
        "resume",
        help="reanuda la memoria de una persona",
        epilog=examples("enlace-assistant memory resume Ana"),
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_guarded("enlace-assistant memory", args, _run)


def open_memories(
    config: AssistantConfig, env: Mapping[str, str], secrets: list[str]
) -> MemoryStore | str:
    """The household's memories (in the history file `web.database` names), or the Spanish
    reason they cannot be used. The configured keys join `secrets` (never stored, never shown)."""
    from enlace_agent.cli.common import open_store
    from enlace_agent.memory import MemoryStore, configured_secrets

    store = open_store(config.web, env)
    if isinstance(store, str):
        return store
    keys = configured_secrets(config, env)
    secrets.extend(keys)
    return MemoryStore(store, config.memory, keys)


def unknown_person(config: AssistantConfig, name: str) -> str | None:
    """Why `name` is nobody of the family (None when it is, or when no family is configured)."""
    names = [p.name for p in config.web.people]
    if names and name not in names:
        return (
            f"«{name}» no está en web.people de assistant.yaml (están: {', '.join(names)}). "
            "Escribe el nombre tal como aparece allí."
        )
    return None


def _run(args: argparse.Namespace, secrets: list[str]) -> int:
    from enlace_agent.memory import ImportProblems, MemoryRefused

    settings = household_settings(args)
    if isinstance(settings, str):
        return fail(settings)
    config, env, _ = settings
    if not config.memory.enabled:
        return fail("la memoria está desactivada (memory.enabled: false en assistant.yaml).")
    if (problem := unknown_person(config, args.name)) is not None:
        return fail(problem)
    memories = open_memories(config, env, secrets)
    if isinstance(memories, str):
        return fail(memories)
    name = args.name
    try:
        if args.command == "list":
            return _list(memories, name, args.json)
        if args.command == "add":
            scope = "familia" if args.familia else "personal"
            memory, new = memories.add(name, args.text, scope, source="cli")
            said = "Añadido" if new else "Ya estaba"
            sys.stderr.write(f"{said}: #{memory.id} [{_whose(memory)}] {memory.text}\n")
            return EXIT_OK
        if args.command == "forget":
            return _forget(memories, name, args)
        if args.command == "export":
            return _export(memories, name, args.out)
        if args.command == "import":
            return _import(memories, name, args.file)
        memories.set_paused(name, args.command == "pause")
        state = "en pausa: no se lee ni se guarda nada" if args.command == "pause" else "activa"
        sys.stderr.write(f"La memoria de {name} está {state}.\n")
        return EXIT_OK
    except MemoryRefused as exc:
        return fail(str(exc))
    except ImportProblems as exc:
        lines = "".join(f"\n  {p}" for p in exc.problems)
        return fail(
            f"no se ha importado nada: {len(exc.problems)} línea(s) no valen (corrígelas o "
            f"bórralas y vuelve a importar):{lines}"
        )


def _whose(memory: Memory) -> str:
    return "familia" if memory.scope == "familia" else "personal"


def _day(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d")


def _list(memories: MemoryStore, name: str, as_json: bool) -> int:
    found = memories.list(name)
    if as_json:
        listed = [m.to_dict() for m in found]
        data = {"person": name, "paused": memories.paused(name), "memories": listed}
        sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2) + "\n")
        return EXIT_OK
    if memories.paused(name):
        sys.stderr.write(f"(La memoria de {name} está en pausa: Enlace no la usa.)\n")
    if not found:
        sys.stderr.write(f"Enlace no recuerda nada de {name} ni de la familia.\n")
    for m in found:
        via = SOURCES_ES.get(m.source, m.source)
        changed = f"; cambiado por {m.changed_by} el {_day(m.updated)}" if m.changed_by else ""
        line = f"#{m.id} [{_whose(m)}] {m.text} ({m.author}, {via}, {_day(m.created)}{changed})"
        sys.stdout.write(line + "\n")
    return EXIT_OK


def _forget(memories: MemoryStore, name: str, args: argparse.Namespace) -> int:
    if args.all:
        if not args.yes:
            return fail(
                f"olvidar todos los recuerdos personales de {name} no se puede deshacer: repite "
                "con --yes (y antes, si quieres, guárdalos con memory export)."
            )
        count = memories.forget_all(name)
        sys.stderr.write(f"Olvidados {count} recuerdos personales de {name}.\n")
        return EXIT_OK
    if not args.ids:
        return fail("di qué recuerdos olvidar: sus números (memory list los muestra) o --all.")
    missing = [i for i in args.ids if memories.get(name, i) is None]
    if missing:
        listed = ", ".join(f"#{i}" for i in missing)
        return fail(f"{name} no tiene ningún recuerdo {listed} (memory list {name} los muestra).")
    for memory_id in args.ids:
        gone = memories.forget(name, memory_id)
        if gone is not None:
            sys.stderr.write(f"Olvidado: #{gone.id} {gone.text}\n")
    return EXIT_OK


def _export(memories: MemoryStore, name: str, out: Path | None) -> int:
    text = "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in memories.export(name))
    if out is None:
        sys.stdout.write(text)
        return EXIT_OK
    if (problem := write_private(out, text)) is not None:
        return fail(problem)
    sys.stderr.write(f"Recuerdos de {name} guardados en {out} (solo tu usuario puede leerlo)\n")
    return EXIT_OK


def _import(memories: MemoryStore, name: str, file: str) -> int:
    try:
        text = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "no es texto UTF-8"
        return fail(f"no se puede leer {file}: {why}.")
    added, already = memories.import_lines(name, text.splitlines())
    sys.stderr.write(f"Importados {added} recuerdos para {name} ({already} ya estaban).\n")
    return EXIT_OK
