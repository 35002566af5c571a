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
from collections.abc import Callable, Iterator, Sequence

import pytest
from enlace_agent.cli.common import DEBUG_HELP as DEBUG_ES
from enlace_config.contracts import DEBUG_HELP as DEBUG_EN

Main = Callable[[Sequence[str]], int]


def help_text(main: Main, argv: Sequence[str]) -> str:
    """What `main([*argv, "--help"])` prints; it must exit 0."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stop:
        main([*argv, "--help"])
    assert stop.value.code in (0, None), f"{argv} --help exited {stop.value.code}"
    return out.getvalue()


def helps(parser: argparse.ArgumentParser, argv: list[str]) -> Iterator[tuple[list[str], bool]]:
    """(argv, runs) for `parser` and every command below it; runs is False for a parser that only
    chooses among commands."""
    subs = [
        (name, sub)
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name, sub in action.choices.items()
    ]
    yield argv, not subs
    for name, sub in subs:
        yield from helps(sub, [*argv, name])


def check(text: str, prog: str, debug: str, runs: bool, example: str = "example") -> None:
    """Ends with `example:` (or the plural) and command lines of `prog` under it; --debug, listed
    by every command that runs, is described as `debug` says."""
    tail = re.search(rf"\n{example}s?:\n((?:  {re.escape(prog)}\b.*\n)+)\Z", text)
    assert tail, f"{prog}: the help does not end with an example:\n{text}"
    if runs or "--debug" in text:
        assert f"--debug {debug}" in " ".join(text.split()), f"{prog}: --debug is not «{debug}»"


def developer_cli(prog: str) -> tuple[Main, list[tuple[list[str], bool]]]:
    """The main of a developer CLI and the helps to read (argv before --help, runs)."""
    if prog == "enlace-config":
        from enlace_config.cli import _parser, main

        return main, list(helps(_parser(), []))
    if prog == "enlace-data":
        from enlace_data.cli import build_parser, main

        return main, list(helps(build_parser(), []))
    if prog == "enlace-model":
        from enlace_model.cli import _parser, main

        return main, list(helps(_parser(), []))
    from enlace_train.cli import USAGE, main  # the verbs have a parser each, listed in USAGE

    verbs = re.findall(r"^enlace-train ([a-z][a-z-]*) ", USAGE, re.MULTILINE)
    return main, [([], True), *(([verb], True) for verb in verbs)]


@pytest.mark.parametrize("prog", ["enlace-config", "enlace-data", "enlace-model", "enlace-train"])
def test_developer_cli_helps_end_with_an_example_and_share_the_debug_words(prog: str) -> None:
    main, argvs = developer_cli(prog)
    assert len(argvs) > 1, f"{prog}: no commands found"
    for argv, runs in argvs:
        check(help_text(main, argv), " ".join([prog, *argv]), DEBUG_EN, runs)


def test_family_cli_helps_end_with_an_example_and_share_the_debug_words() -> None:
    import importlib

    from enlace_agent.cli import assistant, search

    argvs: list[tuple[list[str], bool]] = [([], True)]  # the chat itself
    for name, verb in assistant.COMMANDS.items():  # every command, from the one table
        parser = importlib.import_module(f"enlace_agent.cli.{verb.module}").build_parser()
        if verb.group:
            argvs += list(helps(parser, [name]))
        else:  # the module's parser has the command among its own
            argvs += [(argv, runs) for argv, runs in helps(parser, []) if argv[:1] == [name]]
    assert {argv[0] for argv, _ in argvs if argv} == set(assistant.COMMANDS)
    for argv, runs in argvs:
        text = help_text(assistant.main, argv)
        check(text, " ".join(["enlace-assistant", *argv]), DEBUG_ES, runs, "ejemplo")
    check(help_text(search.main, []), "enlace-search", DEBUG_ES, True, "ejemplo")


def test_search_mcp_help_ends_with_an_example() -> None:
    pytest.importorskip("mcp", reason="the mcp extra")
    from enlace_agent.cli.search_mcp import main

    check(help_text(main, []), "enlace-search-mcp", DEBUG_ES, True, "ejemplo")


def test_check_refuses_a_help_without_an_example() -> None:
    parser = argparse.ArgumentParser(prog="tool")
    parser.add_argument("--debug", action="store_true", help=DEBUG_EN)
    with pytest.raises(AssertionError, match="does not end with an example"):
        check(parser.format_help(), "tool", DEBUG_EN, True)
    parser.epilog = "example:\n  tool run"
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    check(parser.format_help(), "tool", DEBUG_EN, True)
    with pytest.raises(AssertionError, match="--debug is not"):
        check(parser.format_help(), "tool", "another wording", True)
