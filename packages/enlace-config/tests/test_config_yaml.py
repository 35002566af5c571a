"""The YAML layer: 1.2 scalars, duplicate keys, positions, and bad files."""

import math
import os
from pathlib import Path
from typing import Any

import pytest

from enlace_config.errors import Problem
from enlace_config.yamlio import dump_scalar, format_float, read_yaml_file


def read(tmp_path: Path, text: str | bytes) -> tuple[Any, list[Problem]]:
    path = tmp_path / "x.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    problems: list[Problem] = []
    doc = read_yaml_file(path, problems)
    return (doc.data if doc else None), problems


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3e-4", 3e-4),  # YAML 1.1 (PyYAML) reads this as the string '3e-4'
        ("1E5", 1e5),
        ("-2.5e-3", -2.5e-3),
        ("1.0e-8", 1e-8),
        (".5", 0.5),
        ("1.", 1.0),
        ("42", 42),
        ("-7", -7),
        ("010", 10),  # YAML 1.1: octal 8
        ("0x1F", 31),
        ("0o17", 15),
        ("100_000", 100000),
        ("true", True),
        ("False", False),
        ("no", "no"),  # YAML 1.1: False
        ("off", "off"),
        ("yes", "yes"),
        ("on", "on"),
        ("y", "y"),
        ("~", None),
        ("null", None),
        ("", None),
        ("2024-01-01", "2024-01-01"),  # YAML 1.1: a date
        ("1:30", "1:30"),  # YAML 1.1: sexagesimal 90
        ("'3e-4'", "3e-4"),
        ('"no"', "no"),
        ("!!str 12", "12"),
        ("!!float 1", 1.0),
        ("[1, 2e-3, no]", [1, 2e-3, "no"]),
    ],
)
def test_scalars_follow_yaml_1_2(tmp_path: Path, text: str, expected: Any) -> None:
    data, problems = read(tmp_path, f"v: {text}\n")
    assert problems == []
    assert data["v"] == expected
    assert type(data["v"]) is type(expected)


def test_inf_and_nan_are_floats(tmp_path: Path) -> None:
    data, _ = read(tmp_path, "a: .inf\nb: -.inf\nc: .nan\n")
    assert data["a"] == math.inf and data["b"] == -math.inf and math.isnan(data["c"])


def test_duplicate_keys_are_errors_with_both_lines(tmp_path: Path) -> None:
    _, problems = read(tmp_path, "a: 1\nb:\n  c: 1\n  c: 2\na: 3\n")
    text = [str(p) for p in problems]
    assert len(problems) == 2
    assert any("x.yaml:4" in t and "b.c" in t and "line 3" in t for t in text)
    assert any("x.yaml:5" in t and "a:" in t and "line 1" in t for t in text)
    assert all("duplicate key" in t for t in text)


def test_syntax_error_names_line_and_column(tmp_path: Path) -> None:
    _, problems = read(tmp_path, "a: 1\nb: [1, 2\nc: 3\n")
    assert len(problems) == 1
    assert "YAML syntax error" in problems[0].message
    assert problems[0].origin is not None and problems[0].origin.line == 3
    assert "column" in problems[0].message
    _, problems = read(tmp_path, "a: 1\n  b: 2\n")
    assert problems[0].origin is not None and problems[0].origin.line == 2
    assert "x.yaml:2" in str(problems[0])


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "is empty"),
        ("# only a comment\n\n", "is empty"),
        ("- a\n- b\n", "must be a mapping"),
        ("just text\n", "must be a mapping"),
        ("{}\n", "empty mapping"),
        ("a: 1\n---\nb: 2\n", "YAML syntax error"),
        ("? [1, 2]\n: x\n", "keys must be plain names"),
        ("1: x\n", "keys must be plain names"),
        ("a: &x [*x]\n", "refers to itself"),
        ("a: !!python/object:os.system x\n", "unsupported YAML tag"),
        ("a: !!int abc\n", "cannot read 'abc' as int"),
        ("base: &b {x: 1}\nother:\n  <<: *b\n", "merge keys (<<) are not supported"),
    ],
)
def test_bad_documents(tmp_path: Path, text: str, needle: str) -> None:
    _, problems = read(tmp_path, text)
    assert problems, text
    assert needle in str(problems[0])
    assert "x.yaml" in str(problems[0])


def test_not_utf8(tmp_path: Path) -> None:
    _, problems = read(tmp_path, b"a: \xff\xfe\n")
    assert "not UTF-8" in str(problems[0])


def test_missing_and_directory(tmp_path: Path) -> None:
    problems: list[Problem] = []
    assert read_yaml_file(tmp_path / "nope.yaml", problems) is None
    assert "file not found" in str(problems[0]) and "nope.yaml" in str(problems[0])
    assert read_yaml_file(tmp_path, problems) is None
    assert "is a directory" in str(problems[1])


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads anything")
def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "secret.yaml"
    path.write_text("a: 1\n")
    path.chmod(0)
    try:
        problems: list[Problem] = []
        assert read_yaml_file(path, problems) is None
        assert "cannot read" in str(problems[0]) and "secret.yaml" in str(problems[0])
    finally:
        path.chmod(0o644)


def test_origins_record_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("a:\n  b: 1\n  c: [1, 2]\n")
    problems: list[Problem] = []
    doc = read_yaml_file(path, problems)
    assert doc is not None
    assert (doc.origins[("a", "b")].line, doc.origins[("a", "b")].column) == (2, 3)
    assert doc.origins[("a", "c", 1)].line == 3
    assert doc.raw[("a", "b")] == "1"


@pytest.mark.parametrize(
    "value",
    [3e-4, 1e-8, 28.7e12, 209.5e12, 0.1, 65536.0, -1.5e-9, 1e300, 5e-324, 0.0, 123456789.0],
)
def test_floats_dump_shortest_and_read_back(tmp_path: Path, value: float) -> None:
    text = dump_scalar(value)
    assert text == format_float(value)
    data, problems = read(tmp_path, f"v: {text}\n")
    assert problems == [] and data["v"] == value and isinstance(data["v"], float)


@pytest.mark.parametrize(
    "value", ["no", "on", "1e5", "3e-4", "010", "2024-01-01", "null", "", "a: b"]
)
def test_strings_that_look_like_other_things_are_quoted(tmp_path: Path, value: str) -> None:
    data, problems = read(tmp_path, f"v: {dump_scalar(value)}\n")
    assert problems == [] and data["v"] == value


def test_os_error_is_reported_not_raised(tmp_path: Path) -> None:
    # A path through a regular file: NotADirectoryError, an OSError, even for root.
    (tmp_path / "file").write_text("")
    problems: list[Problem] = []
    assert read_yaml_file(tmp_path / "file" / "x.yaml", problems) is None
    assert "cannot read" in str(problems[0]) and "x.yaml" in str(problems[0])
