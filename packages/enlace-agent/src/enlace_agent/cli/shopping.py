"""`enlace-assistant lista [ver | añadir | quitar | tachar | limpiar]`: the household's shopping
list from the terminal (the page's «Lista de la compra», the same list). Exit codes: 0 done, 2 bad
usage, input or configuration. Standard library only until the arguments are read."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from enlace_agent.cli.common import (
    DEBUG_HELP,
    EXIT_OK,
    EXITS_DONE,
    Parser,
    examples,
    fail,
    household_store,
    run_guarded,
)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="enlace-assistant lista",
        description="La lista de la compra de la familia: verla, añadir, quitar, tachar lo "
        "comprado y limpiarlo (la misma lista que «Lista de la compra» en la página).",
        epilog=EXITS_DONE
        + "\n\n"
        + examples("enlace-assistant lista", "enlace-assistant lista añadir leche huevos"),
    )
    subparsers = parser.add_subparsers(dest="command", parser_class=Parser)

    def command(name: str, help: str, *example: str, things: bool = True) -> None:
        sub = subparsers.add_parser(name, help=help, epilog=examples(*example))
        if things:
            sub.add_argument("things", nargs="+", metavar="COSA", help="una cosa por argumento")
        sub.add_argument("--person", metavar="NOMBRE", help="quién lo apunta (en la página)")
        common(sub)

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--config", type=Path, metavar="RUTA", help="fichero assistant.yaml")
        sub.add_argument("--env-file", type=Path, metavar="RUTA", help="fichero .env")
        sub.add_argument("--debug", action="store_true", help=DEBUG_HELP)

    see = subparsers.add_parser(
        "ver",
        help="lo que hay en la lista (la orden por defecto)",
        epilog=examples("enlace-assistant lista ver", "enlace-assistant lista ver --json"),
    )
    see.add_argument("--json", action="store_true", help="la lista en JSON")
    common(see)
    command(
        "añadir", "añade cosas a la lista", "enlace-assistant lista añadir leche «pan de molde»"
    )
    command("quitar", "quita cosas de la lista", "enlace-assistant lista quitar huevos")
    command("tachar", "marca cosas como compradas", "enlace-assistant lista tachar leche")
    command("limpiar", "quita lo ya comprado", "enlace-assistant lista limpiar", things=False)
    common(parser)  # `enlace-assistant lista` alone is `ver`
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command is None:
        args.command, args.json = "ver", False
    return run_guarded("enlace-assistant lista", args, _run)


def _run(args: argparse.Namespace, secrets: list[str]) -> int:
    from enlace_agent.tools.shopping import ItemRefused, ShoppingList, listing

    opened = household_store(args)
    if isinstance(opened, str):
        return fail(opened)
    shopping = ShoppingList(opened[2])
    if args.command == "ver":
        items = shopping.items()
        if args.json:
            data = {"items": [i.to_dict() for i in items]}
            sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2) + "\n")
        else:
            for item in items:
                sys.stdout.write(f"[{'x' if item.done else ' '}] {item.item}\n")
            sys.stderr.write(listing(items) + "\n")
        return EXIT_OK
    if args.command == "limpiar":
        removed = shopping.clear()
        sys.stderr.write(f"Quitado lo ya comprado: {removed}.\n")
        return EXIT_OK
    if args.command == "añadir":
        try:
            added = shopping.add(args.person or "terminal", args.things)
        except ItemRefused as exc:
            return fail(str(exc))
        for item, new in added:
            sys.stderr.write(f"{'Añadido' if new else 'Ya estaba'}: {item.item}\n")
        return EXIT_OK
    if args.command == "quitar":
        removed, missing = shopping.remove(args.things)
    else:  # tachar
        found = [(t, shopping.find(t)) for t in args.things]
        removed = [shopping.tick(i.id, True) or i for _, i in found if i is not None]
        missing = [t for t, i in found if i is None]
    verb = "Quitado" if args.command == "quitar" else "Tachado"
    for item in removed:
        sys.stderr.write(f"{verb}: {item.item}\n")
    if missing:
        return fail(f"no está en la lista: {', '.join(missing)} («enlace-assistant lista»).")
    return EXIT_OK
