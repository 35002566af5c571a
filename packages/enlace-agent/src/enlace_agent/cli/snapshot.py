"""`enlace-assistant snapshot create [--to DIR] | list | verify FILE | restore FILE [--person NAME]`:
copies of the household's histories and settings (README, «Copias de seguridad»). Exit codes: 0
done, 1 the snapshot or restore failed (disk full, damaged new copy), 2 bad usage, configuration
or a refused archive. Only the standard library is imported before the arguments are read."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from enlace_agent.cli.common import (
    DEBUG_HELP,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    Parser,
    examples,
    fail,
    household_settings,
    run_guarded,
)

if TYPE_CHECKING:
    from enlace_agent.snapshot import Household, Snapshot

EXAMPLES = """Antes de restaurar se hace una copia del estado actual, así que una restauración se deshace
restaurando esa copia. Códigos de salida: 0 hecho, 1 falló (disco lleno, copia dañada al
hacerla), 2 uso, configuración o copia rechazada.

ejemplos:
  enlace-assistant snapshot create                  # una copia ahora (comprobada al hacerla)
  enlace-assistant snapshot create --to /media/usb  # en un disco externo
  enlace-assistant snapshot list
  enlace-assistant snapshot verify ~/.local/share/enlace/snapshots/enlace-snapshot-…tar.gz
  enlace-assistant snapshot restore enlace-snapshot-…tar.gz               # toda la casa
  enlace-assistant snapshot restore enlace-snapshot-…tar.gz --person Ana  # solo Ana"""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="enlace-assistant snapshot",
        description="Copias de seguridad del historial de la familia y de sus ajustes.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    create = commands.add_parser(
        "create",
        help="hace una copia y la comprueba",
        epilog=examples("enlace-assistant snapshot create --to /media/usb"),
    )
    create.add_argument("--to", type=Path, metavar="CARPETA", help="dónde dejarla")
    listed = commands.add_parser(
        "list", help="las copias guardadas", epilog=examples("enlace-assistant snapshot list")
    )
    listed.add_argument(
        "--in", dest="folder", type=Path, metavar="CARPETA", help="otra carpeta (la de --to)"
    )
    verify = commands.add_parser(
        "verify",
        help="comprueba una copia de arriba abajo",
        epilog=examples(
            "enlace-assistant snapshot verify enlace-snapshot-20261204T030000Z-daily.tar.gz"
        ),
    )
    verify.add_argument("file", type=Path, metavar="FICHERO")
    restore = commands.add_parser(
        "restore",
        help="vuelve al estado de una copia",
        epilog="Antes se hace una copia del estado actual: la orden dice cómo deshacerlo.\n\n"
        + examples(
            "enlace-assistant snapshot restore enlace-snapshot-20261204T030000Z-daily.tar.gz "
            "--person Ana"
        ),
    )
    restore.add_argument("file", type=Path, metavar="FICHERO")
    restore.add_argument("--person", metavar="NOMBRE", help="solo las conversaciones de NOMBRE")
    restore.add_argument(
        "--otra-casa",
        dest="other_household",
        action="store_true",
        help="la copia es de otra casa (ninguna de sus personas vive aquí): restaurarla igualmente",
    )
    for sub in (create, listed, verify, restore):
        sub.add_argument("--config", type=Path, metavar="RUTA", help="fichero assistant.yaml")
        sub.add_argument(
            "--env-file", type=Path, metavar="RUTA", help="fichero .env (la contraseña)"
        )
        sub.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_guarded("enlace-assistant snapshot", args, _run)


def _household(args: argparse.Namespace, secrets: list[str]) -> Household | str:
    from enlace_agent.snapshot import household

    settings = household_settings(args)
    if isinstance(settings, str):
        return settings
    config, env, paths = settings
    h = household(config, env, paths=paths)
    if h.passphrase:
        secrets.append(h.passphrase)
    return h


def _run(args: argparse.Namespace, secrets: list[str]) -> int:
    h = _household(args, secrets)
    if isinstance(h, str):
        return fail(h)
    from enlace_agent.snapshot import SnapshotError

    try:
        if args.command == "create":
            made = _create(h, args.to)
        elif args.command == "list":
            made = _list(h, args.folder)
        elif args.command == "verify":
            made = _verify(h, _resolve(h, args.file))
        else:
            made = _restore(h, _resolve(h, args.file), args.person, args.other_household)
    except SnapshotError as exc:
        return fail(str(exc), EXIT_USAGE if exc.usage else EXIT_FAILED)
    return made


def _resolve(h: Household, file: Path) -> Path:
    """A bare archive name means the one in the snapshot folder."""
    if not file.exists() and file.parent == Path() and (h.directory / file).exists():
        return h.directory / file
    return file


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def _summary(contents: Any) -> str:
    if not contents:
        return "contenido desconocido"
    per = contents.get("conversations", {})
    people = ", ".join(f"{p} ({per.get(p, 0)})" for p in contents.get("people", [])) or "nadie"
    said = f"conversaciones de {people}; {contents.get('messages', 0)} mensajes"
    return said + (f"; {contents['memories']} recuerdos" if contents.get("memories") else "")


def _line(s: Snapshot) -> str:
    when = s.created.astimezone().strftime("%Y-%m-%d %H:%M")
    state = "comprobada" if s.verified else "SIN COMPROBAR"
    sealed = ", cifrada" if s.sealed else ""
    return f"{when}  {_size(s.size):>9}  {state}{sealed}  [{s.kind}]  {s.path.name}\n    {_summary(s.contents)}"


def _create(h: Household, to: Path | None) -> int:
    from enlace_agent.snapshot import create

    made = create(h, "manual", to)
    sys.stdout.write(f"Copia hecha y comprobada: {made.path} ({_size(made.size)})\n")
    sys.stdout.write(f"    {_summary(made.contents)}\n")
    return EXIT_OK


def _list(h: Household, folder: Path | None) -> int:
    from enlace_agent.snapshot import snapshots

    folder = folder or h.directory
    found = snapshots(folder)
    if not found:
        sys.stdout.write(f"No hay copias en {folder}.\n")
        return EXIT_OK
    sys.stdout.write(f"Copias en {folder} (la más reciente primero):\n")
    for s in found:
        sys.stdout.write(_line(s) + "\n")
    return EXIT_OK


def _verify(h: Household, file: Path) -> int:
    from enlace_agent.snapshot import verify

    manifest = verify(h, file)
    sys.stdout.write(
        f"La copia {file.name} está bien: cada fichero coincide con su huella y el historial "
        f"pasa la comprobación de SQLite.\n    hecha el {manifest['created']} con Enlace "
        f"{manifest['enlace_version']}; {_summary(manifest.get('contents'))}\n"
    )
    return EXIT_OK


def _restore(h: Household, file: Path, person: str | None, other_household: bool) -> int:
    from enlace_agent.snapshot import restore

    done = restore(h, file, person, other_household=other_household)
    who = f"Las conversaciones de {person}" if person else "El historial de toda la casa"
    sys.stdout.write(f"{who} vuelve a estar como el {done.manifest['created']}.\n")
    if done.undo is not None:
        sys.stdout.write(
            f"Para deshacerlo: enlace-assistant snapshot restore {done.undo.path}"
            + (f" --person {person}" if person else "")
            + "\n"
        )
    if done.settings is not None and person is None:
        sys.stdout.write(
            f"Los ajustes de la copia están en {done.settings} (los de ahora no se han tocado: "
            "cópialos a ~/.config/enlace si quieres volver a ellos).\n"
        )
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
