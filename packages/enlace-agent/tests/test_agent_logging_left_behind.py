"""A CLI's `main` run in the test process (as the snapshot faults' tests do, under capsys) installs
a root handler on that test's sys.stderr, which pytest closes afterwards; a later test's server
thread then logged a request into the closed stream («--- Logging error ---» in CI's log). The
autouse `logging_restored` fixture (conftest.py) undoes it after every test. The two tests run in
this order: the first leaves the handler, the second logs as the page's server does."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest


def test_a_cli_main_in_process_sets_up_logging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from enlace_agent.cli.snapshot import main

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert main(["list", "--config", str(tmp_path / "missing.yaml")]) != 0
    assert capsys.readouterr().err
    assert any(isinstance(h, logging.StreamHandler) for h in logging.getLogger().handlers)


def test_a_later_request_line_finds_no_closed_stream(capsys: pytest.CaptureFixture[str]) -> None:
    access = logging.getLogger("enlace_agent.web.access")
    access.setLevel(logging.INFO)  # as `serve` sets it (logging_restored puts it back)
    access.info("%s %s %d %.0f ms", "GET", "/static/app.js", 200, 9.8)
    assert "Logging error" not in capsys.readouterr().err
