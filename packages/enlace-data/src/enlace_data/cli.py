"""`enlace-data`: the data command line (smoke corpus, shard inspection, corpus pipeline, chat data).

A subcommand is a module with `add_parser(subparsers)` (which sets `func=run`, `run(args) -> int`)
listed in `SUBCOMMAND_MODULES`; heavy imports stay inside `run`. A `DataError` is printed as one
paragraph with exit code 2 (a traceback only with `--debug`).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from enlace_config.contracts import DEBUG_HELP

from enlace_data.errors import DataError

# The developer command lines' shared words (tests/test_cli_help.py holds them to it).

SUBCOMMAND_MODULES: list[str] = [
    "enlace_data.smoke",
    "enlace_data.inspect_cmd",
    "enlace_data.corpus.cli",
    "enlace_data.chat.cmd",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="enlace-data",
        description="Enlace data tools: prepare the smoke corpus, inspect shards, build the corpus,\n"
        "show a tokenizer, write chat data.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  enlace-data smoke\n  enlace-data corpus configs/corpus/es-pd.yaml",
    )
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).add_parser(sub)
    for command in sub.choices.values():  # main() takes --debug anywhere: say so in each --help
        command.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    # --debug is accepted anywhere on the line, not only before the subcommand
    debug = "--debug" in argv
    args = parser.parse_args([a for a in argv if a != "--debug"])
    args.debug = debug
    try:
        return int(args.func(args) or 0)
    except DataError as e:
        if args.debug:
            raise
        print(f"enlace-data {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"enlace-data {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
