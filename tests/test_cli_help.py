"""Every command line in one shape (issue 31.4): `TOOL COMMAND ...`, each `--help` (top level and
every command) exits 0 and ends with an example, and `--debug` is said in the same words everywhere
(English for the developer tools, Spanish for the family's). In-process: each CLI's own `main`
with `--help`, so one interpreter runs them all. Commands are read from the parsers themselves,
so a new command without an example fails here."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
from collections.abc import Callable, Sequence

import pytest

DEBUG_EN = "show tracebacks on errors"

Main = Callable[[Sequence[str]], int]


def help_text(main: Main, argv: Sequence[str]) -> str:
    """What `main([*argv, "--help"])` prints; it must exit 0."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stop:
        main([*argv, "--help"])
    assert stop.value.code in (0, None), f"{argv} --help exited {stop.value.code}"
    return out.getvalue()


def commands(parser: argparse.ArgumentParser) -> list[str]:
    """The subcommands of an argparse parser, in order."""
    found: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.extend(action.choices)
    return found


def check(text: str, prog: str, debug: str, example: str = "example") -> None:
    """Ends with `example:` (or the plural) and command lines of `prog` under it; --debug is
    described as `debug` says."""
    tail = re.search(rf"\n{example}s?:\n((?:  {re.escape(prog)}\b.*\n)+)\Z", text)
    assert tail, f"{prog}: the help does not end with an example:\n{text}"
    assert f"--debug {debug}" in " ".join(text.split()), f"{prog}: --debug is not «{debug}»"


def developer_clis() -> list[tuple[str, Main, list[list[str]]]]:
    """(program, main, the argv before --help of each help to read) for the four developer CLIs."""
    from enlace_config.cli import _parser as config_parser
    from enlace_config.cli import main as config_main
    from enlace_data.cli import build_parser as data_parser
    from enlace_data.cli import main as data_main
    from enlace_model.cli import _parser as model_parser
    from enlace_model.cli import main as model_main
    from enlace_train.cli import USAGE
    from enlace_train.cli import main as train_main

    train_verbs = re.findall(r"^enlace-train ([a-z][a-z-]*) ", USAGE, re.MULTILINE)
    return [
        ("enlace-config", config_main, [[], *([c] for c in commands(config_parser()))]),
        ("enlace-data", data_main, [[], *([c] for c in commands(data_parser()))]),
        ("enlace-model", model_main, [[], *([c] for c in commands(model_parser()))]),
        ("enlace-train", train_main, [[], *([v] for v in train_verbs)]),
    ]


@pytest.mark.parametrize("prog", ["enlace-config", "enlace-data", "enlace-model", "enlace-train"])
def test_developer_cli_helps_end_with_an_example_and_share_the_debug_words(prog: str) -> None:
    ((_, main, argvs),) = [c for c in developer_clis() if c[0] == prog]
    assert len(argvs) > 1 or prog == "enlace-model", f"{prog}: no commands found"
    for argv in argvs:
        check(help_text(main, argv), " ".join([prog, *argv]) if argv else prog, DEBUG_EN)


def test_check_refuses_a_help_without_an_example() -> None:
    parser = argparse.ArgumentParser(prog="tool")
    parser.add_argument("--debug", action="store_true", help=DEBUG_EN)
    with pytest.raises(AssertionError, match="does not end with an example"):
        check(parser.format_help(), "tool", DEBUG_EN)
    parser.epilog = "example:\n  tool run"
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    check(parser.format_help(), "tool", DEBUG_EN)
    with pytest.raises(AssertionError, match="--debug is not"):
        check(parser.format_help(), "tool", "another wording")
