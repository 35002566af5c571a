"""Reading YAML the way a config needs it: YAML 1.2 scalars, no duplicate keys, positions kept.

PyYAML implements YAML 1.1, whose scalar rules bite configs: `3e-4` is a string (1.1 floats need a
dot), `no`/`on`/`yes`/`off` are booleans (so `name: no` is False), `010` is octal, `2024-01-01`
is a date. Here plain scalars follow the YAML 1.2 core schema instead: null is `~`/`null`/empty,
booleans are `true`/`false` only, integers are decimal (`0x`/`0o` prefixed allowed), floats include
`3e-4`; `_` may separate digits as in Python (`100_000`). Everything else is a string.

PyYAML also keeps the last of two equal keys in a mapping without a word; here that is an error. The
parse goes through PyYAML's composer (libyaml's when installed) to nodes, which carry their line and
column, and this module builds the Python values itself, recording where every value came from.
"""

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import BaseResolver

from enlace_config.errors import Origin, Problem, display_path

KeyPath = tuple[str | int, ...]

_TAG = "tag:yaml.org,2002:"
NULL_TAG, BOOL_TAG, INT_TAG, FLOAT_TAG, STR_TAG = (
    _TAG + "null",
    _TAG + "bool",
    _TAG + "int",
    _TAG + "float",
    _TAG + "str",
)
_DIGITS = r"[0-9]+(?:_[0-9]+)*"
_INT_RE = re.compile(
    rf"^(?:[-+]?{_DIGITS}|[-+]?0o[0-7]+(?:_[0-7]+)*|[-+]?0x[0-9a-fA-F]+(?:_[0-9a-fA-F]+)*)$"
)
_FLOAT_RE = re.compile(
    rf"^(?:[-+]?(?:{_DIGITS}(?:\.(?:{_DIGITS})?)?|\.{_DIGITS})(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)
_BOOL_RE = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_NULL_RE = re.compile(r"^(?:~|null|Null|NULL|)$")


class Yaml12Resolver(BaseResolver):
    """Implicit tags of the YAML 1.2 core schema (plus `_` digit separators)."""


def _add_resolvers(cls: Any, *, with_bool_and_null: bool) -> None:
    # PyYAML's stubs leave these untyped: keep the Any at this one boundary.
    if with_bool_and_null:
        cls.add_implicit_resolver(BOOL_TAG, _BOOL_RE, list("tTfF"))
        cls.add_implicit_resolver(NULL_TAG, _NULL_RE, ["~", "n", "N", ""])
    cls.add_implicit_resolver(INT_TAG, _INT_RE, list("-+0123456789"))
    cls.add_implicit_resolver(FLOAT_TAG, _FLOAT_RE, list("-+.0123456789"))


_add_resolvers(Yaml12Resolver, with_bool_and_null=True)


class _NodeLoader(Protocol):
    def get_single_node(self) -> Node | None: ...

    def dispose(self) -> None: ...


def _loader_class(use_libyaml: bool = True) -> Callable[[str], _NodeLoader]:
    """PyYAML's composer (libyaml's C parser when installed) with the YAML 1.2 resolver."""
    bases: tuple[Any, ...] = ()
    if use_libyaml:
        try:
            cyaml: Any = importlib.import_module("yaml.cyaml")
            bases = (cyaml.CParser,)
        except (ImportError, AttributeError):  # no libyaml: the pure-Python parser below
            bases = ()
    if not bases:
        pure: Any = yaml
        bases = (
            pure.reader.Reader,
            pure.scanner.Scanner,
            pure.parser.Parser,
            pure.composer.Composer,
        )

    def __init__(self: Any, stream: str) -> None:
        bases[0].__init__(self, stream)
        for base in bases[1:]:
            base.__init__(self)
        Yaml12Resolver.__init__(self)

    cls: Any = type("Yaml12Loader", (*bases, Yaml12Resolver), {"__init__": __init__})
    return cast(Callable[[str], _NodeLoader], cls)


_Loader = _loader_class()


class _Yaml12Dumper(yaml.SafeDumper):
    """SafeDumper that also quotes strings which YAML 1.2 would read as numbers (`'1e5'`).

    SafeDumper already quotes what YAML 1.1 would misread (`'no'`, `'2024-01-01'`), so the output
    reads back the same under both rule sets.
    """


_add_resolvers(_Yaml12Dumper, with_bool_and_null=False)


def format_float(value: float) -> str:
    """The shortest text that reads back to exactly `value`; scientific for very large or small.

    `2.87e+13` rather than `28700000000000.0`; always with a dot, so YAML 1.1 readers agree.
    """
    if value != value or value in (float("inf"), float("-inf")):
        return ".nan" if value != value else (".inf" if value > 0 else "-.inf")
    if value == 0 or 1e-4 <= abs(value) < 1e7:
        return repr(value)
    for digits in range(17):
        text = f"{value:.{digits}e}"
        if float(text) == value:
            mantissa, _, exponent = text.partition("e")
            if "." not in mantissa:
                mantissa += ".0"
            return f"{mantissa}e{exponent}"
    return repr(value)  # pragma: no cover - 17 significant digits always round-trip


def _represent_float(dumper: Any, value: float) -> Any:
    return dumper.represent_scalar(FLOAT_TAG, format_float(value))


_Yaml12Dumper.add_representer(float, _represent_float)


def dump_scalar(value: Any) -> str:
    """One value (scalar or list) in YAML flow style, as it would be written after `key: `."""
    text = yaml.dump(value, Dumper=_Yaml12Dumper, default_flow_style=True, width=1 << 30)
    text = text.rstrip("\n")
    return text.removesuffix("\n...").rstrip("\n")


@dataclass
class YamlDoc:
    """A parsed YAML document with the origin of every value.

    `origins` maps key paths (`("train", "lr")`, list items by index) to where each value was
    written; `raw` keeps the source text of plain scalars that became numbers or booleans, so that
    a string field given `2060` can take the text as written.
    """

    data: Any
    origins: dict[KeyPath, Origin] = field(default_factory=lambda: {})
    raw: dict[KeyPath, str] = field(default_factory=lambda: {})


def as_mapping(value: Any) -> dict[str, Any] | None:
    """`value` typed as a mapping of names when it is a dict (what YAML mappings become here)."""
    return cast(dict[str, Any], value) if isinstance(value, dict) else None


def as_list(value: Any) -> list[Any] | None:
    return cast(list[Any], value) if isinstance(value, list) else None


def _to_int(text: str) -> int:
    digits = text.replace("_", "")
    sign = -1 if digits.startswith("-") else 1
    body = digits.lstrip("+-")
    if body[:2].lower() in ("0x", "0o"):
        return sign * int(body, 0)
    return sign * int(body, 10)


def _to_float(text: str) -> float:
    lowered = text.lower()
    if lowered.endswith(".inf"):
        return float("-inf") if lowered.startswith("-") else float("inf")
    if lowered == ".nan":
        return float("nan")
    return float(text.replace("_", ""))


class _Builder:
    def __init__(self, origin_at: Callable[[Node], Origin], problems: list[Problem]) -> None:
        self.origin_at = origin_at
        self.problems = problems
        self.doc = YamlDoc(data=None)
        self._active: set[int] = set()

    def _problem(self, node: Node, path: KeyPath, message: str) -> None:
        key = ".".join(str(p) for p in path) or None
        self.problems.append(Problem(message, key=key, origin=self.origin_at(node)))

    def build(self, node: Node, path: KeyPath) -> Any:
        if id(node) in self._active:
            self._problem(node, path, "a YAML alias refers to itself (recursive structure)")
            return None
        self._active.add(id(node))
        try:
            if isinstance(node, MappingNode):
                return self._mapping(node, path)
            if isinstance(node, SequenceNode):
                items: list[Any] = []
                for i, item in enumerate(node.value):
                    self.doc.origins[(*path, i)] = self.origin_at(item)
                    items.append(self.build(item, (*path, i)))
                return items
            assert isinstance(node, ScalarNode)
            return self._scalar(node, path)
        finally:
            self._active.discard(id(node))

    def _mapping(self, node: MappingNode, path: KeyPath) -> dict[str, Any]:
        out: dict[str, Any] = {}
        first_seen: dict[str, Node] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag != STR_TAG:
                shown = key_node.value if isinstance(key_node, ScalarNode) else "a non-scalar key"
                self._problem(key_node, path, f"keys must be plain names (strings), got {shown!r}")
                continue
            key = str(key_node.value)
            if key == "<<" and key_node.style in (None, ""):
                self._problem(
                    key_node,
                    path,
                    "YAML merge keys (<<) are not supported: layer files with include: instead",
                )
                continue
            if key in first_seen:
                first = self.origin_at(first_seen[key])
                self._problem(
                    key_node,
                    (*path, key),
                    f"duplicate key (already set at line {first.line}); YAML would silently "
                    "keep only the last one: remove one of them",
                )
                continue
            first_seen[key] = key_node
            self.doc.origins[(*path, key)] = self.origin_at(key_node)
            out[key] = self.build(value_node, (*path, key))
        return out

    def _scalar(self, node: ScalarNode, path: KeyPath) -> Any:
        text = str(node.value)
        tag = node.tag
        try:
            if tag == STR_TAG:
                return text
            if tag == NULL_TAG:
                return None
            if tag == BOOL_TAG:
                if text.lower() not in ("true", "false"):
                    raise ValueError(f"{text!r} is not true or false")
                value: Any = text.lower() == "true"
            elif tag == INT_TAG:
                value = _to_int(text)
            elif tag == FLOAT_TAG:
                value = _to_float(text)
            else:
                self._problem(node, path, f"unsupported YAML tag {tag} (plain values only)")
                return None
        except ValueError as exc:
            self._problem(node, path, f"cannot read {text!r} as {tag.removeprefix(_TAG)}: {exc}")
            return None
        if not node.style:  # plain scalar (None or "" by parser): keep its text for string fields
            self.doc.raw[path] = text
        return value


def parse_yaml(
    text: str, origin_at: Callable[[int | None, int | None], Origin], problems: list[Problem]
) -> YamlDoc | None:
    """Parse one YAML document. `origin_at(line, column)` (1-based) makes origins.

    Appends problems (syntax errors with their line and column, duplicate keys, bad tags) to
    `problems`. Returns None for a syntax error or an empty document; otherwise the document (with
    whatever could be built where values had problems).
    """
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        column = mark.column + 1 if mark is not None else None
        what = " ".join(str(part) for part in (exc.context, exc.problem) if part)
        where = f" (column {column})" if column is not None else ""
        problems.append(
            Problem(f"YAML syntax error{where}: {what}", origin=origin_at(line, column))
        )
        return None
    except yaml.YAMLError as exc:
        problems.append(Problem(f"YAML error: {exc}", origin=origin_at(None, None)))
        return None
    finally:
        loader.dispose()
    if node is None:
        return None

    def node_origin(n: Node) -> Origin:
        return origin_at(n.start_mark.line + 1, n.start_mark.column + 1)

    builder = _Builder(node_origin, problems)
    builder.doc.origins[()] = origin_at(None, None)
    builder.doc.data = builder.build(node, ())
    return builder.doc


def read_yaml_file(
    path: Path, problems: list[Problem], *, key: str | None = None, via: Origin | None = None
) -> YamlDoc | None:
    """Read a config file whose top level must be a non-empty mapping.

    Problems with the file as a whole (missing, unreadable, not UTF-8, empty, not a mapping) are
    reported against `key`/`via` when the file was named somewhere (an include), else against the
    file itself. Returns None when nothing usable was read.
    """
    shown = display_path(path)
    file_origin = via if via is not None else Origin.in_file(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        problems.append(Problem(f"file not found: {shown}", key=key, origin=file_origin))
        return None
    except IsADirectoryError:
        problems.append(
            Problem(f"{shown} is a directory, not a YAML file", key=key, origin=file_origin)
        )
        return None
    except OSError as exc:
        reason = exc.strerror or str(exc)
        problems.append(Problem(f"cannot read {shown}: {reason}", key=key, origin=file_origin))
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        problems.append(
            Problem(
                f"{shown} is not UTF-8 text (bad byte at offset {exc.start})",
                key=key,
                origin=file_origin,
            )
        )
        return None

    def origin_at(line: int | None, column: int | None) -> Origin:
        return Origin.in_file(path, line, column)

    before = len(problems)
    doc = parse_yaml(text.removeprefix("\ufeff"), origin_at, problems)
    if doc is None:
        if len(problems) == before:  # no syntax error: the document was empty
            problems.append(
                Problem(
                    f"{shown} is empty (only comments or blank); expected a mapping of keys",
                    key=key,
                    origin=file_origin,
                )
            )
        return None
    top = as_mapping(doc.data)
    if top is None:
        kind = "a list" if as_list(doc.data) is not None else f"the value {doc.data!r}"
        problems.append(
            Problem(
                f"the top level of {shown} must be a mapping of keys (key: value lines), "
                f"not {kind}",
                key=key,
                origin=Origin.in_file(path, 1),
            )
        )
        return None
    if not top:
        problems.append(
            Problem(f"{shown} holds an empty mapping; expected keys", key=key, origin=file_origin)
        )
        return None
    return doc
