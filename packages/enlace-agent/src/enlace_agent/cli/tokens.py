"""`enlace-assistant token create | list | revoke`: the keys of the devices and applications that
talk to Enlace through its OpenAI-compatible endpoint (Home Assistant, a phone's chat app). Exit
codes: 0 done, 2 bad usage, input or configuration. Standard library only until the arguments
are read."""

from __future__ import annotations

import argparse
import datetime as dt
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
        prog="enlace-assistant token",
        description="Las claves de los dispositivos y aplicaciones que hablan con Enlace por su "
        "API compatible con OpenAI (Home Assistant, una aplicación de chat del móvil). Cada "
        "clave es de una persona (sus recuerdos y su historial) o de la casa, y se muestra una "
        "sola vez.",
        epilog=EXITS_DONE
        + "\n\n"
        + examples(
            "enlace-assistant token create Ana --nombre móvil",
            "enlace-assistant token create --casa --nombre 'altavoz de la cocina' --voz",
            "enlace-assistant token revoke 3",
        ),
    )
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    def command(name: str, help: str, example: str) -> argparse.ArgumentParser:
        sub = subparsers.add_parser(name, help=help, epilog=examples(example))
        sub.add_argument("--config", type=Path, metavar="RUTA", help="fichero assistant.yaml")
        sub.add_argument("--env-file", type=Path, metavar="RUTA", help="fichero .env")
        sub.add_argument("--debug", action="store_true", help=DEBUG_HELP)
        return sub

    create = command(
        "create",
        "crea una clave y la muestra una vez",
        "enlace-assistant token create Ana --nombre móvil",
    )
    create.add_argument("person", metavar="NOMBRE", nargs="?", help="la persona (de web.people)")
    create.add_argument("--casa", action="store_true", help="de la casa, no de una persona")
    create.add_argument(
        "--nombre", required=True, metavar="DISPOSITIVO", help="«móvil», «altavoz de la cocina»"
    )
    create.add_argument(
        "--voz", action="store_true", help="respuestas para un altavoz: cortas, sin listas ni URL"
    )
    listing = command(
        "list", "las claves, con su dueño y su último uso", "enlace-assistant token list"
    )
    listing.add_argument("--json", action="store_true", help="salida JSON")
    revoke = command("revoke", "revoca una clave por su número", "enlace-assistant token revoke 3")
    revoke.add_argument("id", metavar="NÚMERO", type=int)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_guarded("enlace-assistant token", build_parser().parse_args(argv), _run)


def _when(moment: float | None) -> str:
    return dt.datetime.fromtimestamp(moment).strftime("%Y-%m-%d %H:%M") if moment else "nunca"


def _run(args: argparse.Namespace, secrets: list[str]) -> int:
    from enlace_agent.cli.memory import unknown_person
    from enlace_agent.household.tokens import ApiTokens, TokenRefused

    opened = household_store(args)
    if isinstance(opened, str):
        return fail(opened)
    config, _, store = opened
    if args.command == "create":
        if (args.person is None) == (not args.casa):
            return fail(
                "di de quién es la clave: el nombre de una persona («token create Ana --nombre "
                "móvil») o --casa para un dispositivo de toda la casa."
            )
        if not config.web.people:
            return fail("no hay nadie en web.people de assistant.yaml: añade a la familia antes.")
        if args.person is not None and (problem := unknown_person(config, args.person)):
            return fail(problem)
    tokens = ApiTokens(store)
    if args.command == "create":
        try:
            token, made = tokens.create(args.person, args.nombre, voice=args.voz)
        except TokenRefused as exc:
            return fail(str(exc))
        secrets.append(token)
        whose = made.holder or "la casa"
        sys.stderr.write(
            f"Clave n.º {made.id} para «{made.name}» ({whose}). Cópiala ahora: no se vuelve a "
            "mostrar. Se usa como «Authorization: Bearer CLAVE» (la «API key» de la "
            "aplicación).\n"
        )
        sys.stdout.write(token + "\n")
        return EXIT_OK
    if args.command == "revoke":
        revoked = tokens.revoke(args.id)
        if revoked is None:
            return fail(f"no hay ninguna clave n.º {args.id} («enlace-assistant token list»).")
        sys.stderr.write(f"Revocada la clave n.º {revoked.id} («{revoked.name}»).\n")
        return EXIT_OK
    found = tokens.list()
    if args.json:
        data = {"tokens": [t.to_dict() for t in found]}
        sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2) + "\n")
        return EXIT_OK
    for t in found:
        state = f"revocada {_when(t.revoked)}" if t.revoked else f"último uso {_when(t.last_used)}"
        voice = ", voz" if t.voice else ""
        sys.stdout.write(f"{t.id:>3}  {t.name} ({t.holder or 'casa'}{voice}) — {state}\n")
    if not found:
        sys.stderr.write("No hay claves («enlace-assistant token create --help»).\n")
    return EXIT_OK
