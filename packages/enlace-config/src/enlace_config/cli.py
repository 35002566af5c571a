"""`enlace-config`: show a resolved run, check config files.

    enlace-config show configs/runs/smoke-cpu.yaml train.lr=3e-4 --origin
    enlace-config check configs/runs/*.yaml configs/model/*.yaml

Bad input (a config with problems, a missing file) exits 2 with the list of problems; `--debug`
adds the traceback. Imports nothing heavy: checking configs never imports torch.
"""

import argparse
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from enlace_config.compose import LoadedConfig, check_file, kind_of, load_config, load_run_config
from enlace_config.errors import ConfigError
from enlace_config.registry import RUNS_FOLDER

EXIT_BAD_INPUT = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="enlace-config",
        description="Compose, show and check Enlace configuration files.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    show = sub.add_parser(
        "show",
        help="print a config resolved (layers, run file, overrides, defaults) as YAML",
        description="Print a run (or any config file) fully resolved, as YAML that reads back "
        "to the same values: what a run records next to its checkpoints.",
    )
    show.add_argument("file", type=Path, metavar="FILE", help="a run file (configs/runs/*.yaml)")
    show.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="overrides, e.g. train.lr=3e-4"
    )
    show.add_argument(
        "--origin", action="store_true", help="say where each value came from (file:line, ...)"
    )
    show.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )
    check = sub.add_parser(
        "check",
        help="validate config files, each with the schema of its folder under configs/",
        description="Validate config files: files under configs/runs/ (or outside configs/) as "
        "composed runs, files in another folder of configs/ with that folder's schema.",
    )
    check.add_argument("files", nargs="+", type=Path, metavar="FILE")
    check.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )
    return parser


def _show(file: Path, overrides: Sequence[str], with_origins: bool) -> int:
    kind = kind_of(file)
    loaded: LoadedConfig[Any]
    if kind is None or kind == RUNS_FOLDER:
        loaded = load_run_config(file, overrides)
    else:
        loaded = load_config(file, overrides)
    sys.stdout.write(loaded.to_yaml(with_origins=with_origins))
    return 0


def _check(files: Sequence[Path]) -> int:
    failures: list[ConfigError] = []
    for file in files:
        try:
            loaded = check_file(file)
        except ConfigError as exc:
            failures.append(exc)
            print(f"FAIL {file}", file=sys.stderr)
            continue
        print(f"ok   {file} ({loaded.kind})")
    if failures:
        print(file=sys.stderr)
        for exc in failures:
            print(f"enlace-config: {exc}", file=sys.stderr)
        print(
            f"\n{len(failures)} of {len(files)} file(s) failed. Fix the values named above in "
            "the files (or overrides) given for each; `enlace-config show RUN.yaml --origin` "
            "shows where every value of a run comes from.",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    debug: bool = args.debug
    try:
        if args.command == "show":
            return _show(args.file, args.overrides, args.origin)
        return _check(args.files)
    except ConfigError as exc:
        if debug:
            traceback.print_exc()
        print(
            f"enlace-config: {exc}\nFix the values above (each line names the key and where it "
            "was set), then rerun.",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    except Exception as exc:  # a bug, not bad input: say so, and how to see more
        if debug:
            raise
        print(
            f"enlace-config: internal error: {type(exc).__name__}: {exc} (rerun with --debug "
            "for the traceback, and report it)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
