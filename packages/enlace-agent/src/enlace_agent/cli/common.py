"""What the command-line tools share: Spanish usage errors (exit 2), logging that never prints a
secret, the one-paragraph error line. Standard library only (imported before arguments are parsed).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from enlace_config.schema.agent import AssistantConfig, WebConfig

    from enlace_agent.household import HouseholdPaths, Store

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXITS_DONE = "Códigos de salida: 0 hecho, 2 uso, datos o configuración incorrectos."
# The same words for --debug in every command's --help (tests/test_cli_help.py holds them to it).
DEBUG_HELP = "registro detallado y trazas"


def examples(*commands: str) -> str:
    """The block every --help ends with: `ejemplo:` (or `ejemplos:`), one command a line."""
    return ("ejemplos:" if len(commands) > 1 else "ejemplo:") + "".join(
        f"\n  {command}" for command in commands
    )


class HelpFormatter(argparse.HelpFormatter):
    """Wraps each line of prose as argparse does; lines that start with two spaces (the examples)
    stay as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        lines: list[str] = []
        for line in text.splitlines():
            if line.startswith("  ") or not line:
                lines.append(indent + line if line else "")
            else:
                lines.append(super()._fill_text(line, width, indent))
        return "\n".join(lines)


class Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> Any:  # argparse exits 2 already; keep it
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


class RedactingFilter(logging.Filter):
    """Removes secrets from every log record (message, arguments and traceback text)."""

    def __init__(self, secrets: list[str]) -> None:
        super().__init__()
        self.secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        from enlace_agent.shared import redact

        if self.secrets:
            record.msg = redact(record.getMessage(), self.secrets)
            record.args = None
            if record.exc_info:
                record.exc_text = redact(
                    logging.Formatter().formatException(record.exc_info), self.secrets
                )
                record.exc_info = None
        return True


# Without --debug the family reads no log line in a terminal: what they can act on is said in
# Spanish; `serve` opens its own lines for the service's journal (README, the page's security).
QUIET = logging.CRITICAL + 1


def setup_logging(debug: bool, secrets: list[str]) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactingFilter(secrets))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if debug else QUIET)
    if not debug:
        # httpx logs every request URL (with the query in it) at INFO.
        logging.getLogger("httpx").setLevel(logging.WARNING)


def write_private(path: Path, text: str) -> str | None:
    """Writes `text` to `path`, private like the history itself (0600, whatever the umask);
    the Spanish reason when it cannot."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)
        with open(fd, "w", encoding="utf-8") as out:
            out.write(text)
    except OSError as exc:
        return f"no se puede escribir {path}: {exc.strerror}."
    return None


def fail(message: str, code: int = EXIT_USAGE) -> int:
    """The one-paragraph error on stderr; returns the exit code (2: bad usage or configuration)."""
    sys.stderr.write(f"Error: {message}\n")
    return code


def run_guarded(
    prog: str, args: argparse.Namespace, run: Callable[[argparse.Namespace, list[str]], int]
) -> int:
    """`run(args, secrets)` with logging that redacts `secrets` (which `run` fills in as it reads
    keys); a bug is one line for the family, its traceback only under --debug."""
    secrets: list[str] = []
    setup_logging(args.debug, secrets)
    from enlace_agent.shared import DiskFull

    try:
        return run(args, secrets)
    except KeyboardInterrupt:
        return 130
    except DiskFull as exc:  # wherever it was writing: said with the folder, nothing changed
        return fail(str(exc), EXIT_FAILED)
    except Exception:
        if args.debug:
            logging.getLogger("enlace_agent").exception("unexpected error in %s", prog)
        else:
            sys.stderr.write(
                f"Error inesperado en {prog} (vuelve a ejecutar con --debug para ver la traza).\n"
            )
        return EXIT_FAILED


def open_store(config: WebConfig, env: Mapping[str, str]) -> Store | str:
    """The household's store as `config` places it, or the Spanish reason it cannot be used (a
    damaged file, one from a newer Enlace)."""
    from enlace_agent.household import StoreError, store_for

    try:
        return store_for(config, env)
    except StoreError as exc:
        return f"no se puede usar el historial: {exc}"


def household_settings(
    args: argparse.Namespace,
) -> tuple[AssistantConfig, dict[str, str], HouseholdPaths] | str:
    """The settings (`--config`), the environment (`--env-file`) and where the household lives,
    built once here for the household's commands; or the Spanish reason the settings are wrong."""
    from enlace_agent.assistant import load_config
    from enlace_agent.household import HouseholdPaths
    from enlace_agent.settings import SettingsError, load_env

    try:
        config, env = load_config(args.config), load_env(args.env_file)
    except SettingsError as exc:
        return f"configuración no válida.\n{exc}"
    return config, env, HouseholdPaths.of(config, env, args.config, args.env_file)


def household_store(
    args: argparse.Namespace,
) -> tuple[AssistantConfig, dict[str, str], Store] | str:
    """`household_settings`, then the household's store (`open_store`); or the Spanish reason
    either cannot be used."""
    settings = household_settings(args)
    if isinstance(settings, str):
        return settings
    config, env, _ = settings
    store = open_store(config.web, env)
    return store if isinstance(store, str) else (config, env, store)
