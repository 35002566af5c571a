"""`enlace-config`: show a resolved run, check config files.

    enlace-config show configs/runs/smoke-cpu.yaml train.lr=3e-4 --origin
    enlace-config check configs/runs/*.yaml configs/model/*.yaml
    enlace-config keys train          # every key of a train layer: type, default, description

Bad input (a config with problems, a missing file) exits 2 with the list of problems; `--debug`
adds the traceback. Imports nothing heavy: checking configs never imports torch.
"""

import argparse
import os
import sys
import traceback
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

from enlace_config.compose import check_file
from enlace_config.contracts import DEBUG_HELP
from enlace_config.errors import ConfigError, Problem
from enlace_config.registry import RUNS_FOLDER, known_folders, schema_for
from enlace_config.yamlio import dump_scalar

EXIT_BAD_INPUT = 2
# The developer command lines' shared words (tests/test_cli_help.py holds them to it).
RAW = argparse.RawDescriptionHelpFormatter


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="enlace-config",
        description="Compose, show and check Enlace configuration files.",
        formatter_class=RAW,
        epilog="examples:\n"
        "  enlace-config show configs/runs/smoke-cpu.yaml train.lr=3e-4 --origin\n"
        "  enlace-config check configs/runs/*.yaml",
    )
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    # --debug is also accepted after the command (`enlace-config show X --debug`)
    debug = argparse.ArgumentParser(add_help=False)
    debug.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    show = sub.add_parser(
        "show",
        parents=[debug],
        formatter_class=RAW,
        help="print a config resolved (layers, run file, overrides, defaults) as YAML",
        description="Print a run (or any config file) fully resolved, as YAML that reads back\n"
        "to the same values: what a run records next to its checkpoints.",
        epilog="example:\n  enlace-config show configs/runs/smoke-cpu.yaml train.lr=3e-4 --origin",
    )
    show.add_argument("file", type=Path, metavar="FILE", help="a run file (configs/runs/*.yaml)")
    show.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="overrides, e.g. train.lr=3e-4"
    )
    show.add_argument(
        "--origin", action="store_true", help="say where each value came from (file:line, ...)"
    )
    check = sub.add_parser(
        "check",
        parents=[debug],
        formatter_class=RAW,
        help="validate config files, each with the schema of its folder under configs/",
        description="Validate config files: files under configs/runs/ (or outside configs/) as\n"
        "composed runs, files in another folder of configs/ with that folder's schema.",
        epilog="example:\n  enlace-config check configs/runs/*.yaml configs/model/*.yaml",
    )
    check.add_argument("files", nargs="+", type=Path, metavar="FILE")
    keys = sub.add_parser(
        "keys",
        parents=[debug],
        formatter_class=RAW,
        help="list the keys of a kind of config with type, default and description",
        description="List every key a config of this kind takes (from the schema's field\n"
        "descriptions): `keys` for run files, `keys model` for model layers, ...",
        epilog="example:\n  enlace-config keys train",
    )
    keys.add_argument(
        "kind", nargs="?", default=RUNS_FOLDER, metavar="KIND", help="runs (default), model, ..."
    )
    return parser


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


def _type_name(annotation: Any) -> str:
    if get_origin(annotation) is Literal:
        return " | ".join(str(a) for a in get_args(annotation))
    args = get_args(annotation)
    if get_origin(annotation) in (Union, types.UnionType):
        return " | ".join("null" if a is type(None) else _type_name(a) for a in args)
    if args:
        return f"{getattr(get_origin(annotation), '__name__', annotation)}[{', '.join(_type_name(a) for a in args)}]"
    return str(getattr(annotation, "__name__", annotation))


# Defaults the loader fills in (not the schema): a run file may leave these out.
LOADER_DEFAULTS = {"run.name": "the run file's stem", "run.out_dir": "runs/<run.name>"}


def _key_lines(model: type[BaseModel], prefix: str) -> list[str]:
    lines: list[str] = []
    for name, info in model.model_fields.items():
        key = f"{prefix}{name}"
        sub = info.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            lines.extend(_key_lines(sub, f"{key}."))
            continue
        if key in LOADER_DEFAULTS:
            default = f"default: {LOADER_DEFAULTS[key]}"
        elif info.is_required():
            default = "required"
        elif info.default_factory is not None:
            default = "default: (computed)"
        else:
            default = f"default: {dump_scalar(info.default)}"
        lines.append(f"{key}  ({_type_name(sub)}; {default})")
        if info.description:
            lines.append(f"    {info.description}")
    return lines


def _keys(kind: str) -> int:
    model = schema_for(kind)
    if model is None:
        raise ConfigError(
            [Problem(f"unknown kind {kind!r}; the kinds are {', '.join(known_folders())}")],
            "enlace-config keys",
        )
    print("\n".join(_key_lines(model, "")))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    debug: bool = args.debug
    try:
        if args.command == "show":
            sys.stdout.write(
                check_file(args.file, args.overrides).to_yaml(with_origins=args.origin)
            )
            return 0
        if args.command == "keys":
            return _keys(args.kind)
        return _check(args.files)
    except BrokenPipeError:  # `enlace-config keys | head`: the reader left, nothing is wrong
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
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
