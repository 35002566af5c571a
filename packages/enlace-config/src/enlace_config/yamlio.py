"""Reading YAML the way a config needs it: YAML 1.2, no duplicate keys, positions kept, bounded.

ruamel.yaml parses YAML 1.2 (`3e-4` is a float, `no`/`on` are strings, `010` is ten, `100_000` a
number) and keeps the line and column of every node. On its composed nodes this module builds plain
Python values, records where each came from, and refuses what a config should not hold, reporting
every case rather than the first: two equal keys in one mapping (ruamel stops at the first), merge
keys, tags other than the plain ones, and aliases that blow a small file up ("billion laughs").
"""

import copy
import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from enlace_config.errors import Origin, Problem, display_path, quote

KeyPath = tuple[str | int, ...]
OriginAt = Callable[[int | None, int | None], Origin]  # (line, column), 1-based, to an Origin

_TAG = "tag:yaml.org,2002:"
STR_TAG, TIMESTAMP_TAG, MERGE_TAG = _TAG + "str", _TAG + "timestamp", _TAG + "merge"
_VALUE_TAGS = {_TAG + name for name in ("null", "bool", "int", "float")}
# Values that aliases may add to a document beyond the nodes written in it: a config repeats a
# block or two, a "billion laughs" file asks for billions.
MAX_ALIAS_VALUES = 10_000
MAX_DEPTH = 64  # configs nest 3 or 4 levels deep
MAX_FILE_BYTES = 2**20  # the largest config is a few KB; parsing 1 MiB takes seconds already


def format_float(value: float) -> str:
    """The shortest text that reads back to exactly `value`; scientific for very large or small.

    `2.87e+13` rather than `28700000000000.0`; always with a dot, so YAML 1.1 readers agree.
    """
    if not math.isfinite(value):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")
    if value == 0 or 1e-4 <= abs(value) < 1e7:
        return repr(value)
    # the fewest digits that read back (17 significant digits always do)
    text = next(t for digits in range(17) if float(t := f"{value:.{digits}e}") == value)
    mantissa, _, exponent = text.partition("e")
    return f"{mantissa if '.' in mantissa else mantissa + '.0'}e{exponent}"


def _represent_float(representer: Any, value: float) -> Any:
    return representer.represent_scalar(_TAG + "float", format_float(value))


_DUMPER: Any = YAML(typ="safe", pure=True)
_DUMPER.default_flow_style = True
_DUMPER.width = 1 << 30
_DUMPER.representer.add_representer(float, _represent_float)


def dump_scalar(value: Any) -> str:
    """One value (scalar or list) in YAML flow style, as it would be written after `key: `."""
    out = io.StringIO()
    _DUMPER.dump(value, out)
    return out.getvalue().rstrip("\n").removesuffix("\n...").rstrip("\n")


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


class Node(Protocol):
    """What this module reads of ruamel.yaml's nodes (whose attributes carry no types)."""

    id: str  # "scalar", "sequence" or "mapping"
    tag: Any
    value: Any  # text, a list of nodes, or a list of (key, value) node pairs
    style: str | None
    start_mark: Any


class _Refused(Exception):
    """A document a config never is: the message says why."""


class _Builder:
    def __init__(self, origin_at: OriginAt, problems: list[Problem], scalars: Any) -> None:
        self._origin_at = origin_at
        self.problems = problems
        self.doc = YamlDoc(data=None)
        self._active: set[int] = set()
        self._seen: set[int] = set()
        self._repeats = 0
        self._scalars = scalars  # the parser's own constructor: it reads scalars as YAML 1.2

    def origin_at(self, node: Node) -> Origin:
        return self._origin_at(node.start_mark.line + 1, node.start_mark.column + 1)

    def _problem(self, node: Node, path: KeyPath, message: str, kind: str = "") -> None:
        key = ".".join(str(p) for p in path) or None
        self.problems.append(Problem(message, key=key, origin=self.origin_at(node), kind=kind))

    def build(self, node: Node, path: KeyPath) -> Any:
        if id(node) in self._active:
            self._problem(node, path, "a YAML alias refers to itself (recursive structure)")
            return None
        if id(node) in self._seen:  # an alias: its values are built once more
            self._repeats += 1
            if self._repeats > MAX_ALIAS_VALUES:
                raise _Refused(
                    f"YAML aliases (*name) repeat more than {MAX_ALIAS_VALUES} values: a config "
                    "never needs that many; write the values out"
                )
        if len(path) > MAX_DEPTH:
            raise _Refused(f"values nested more than {MAX_DEPTH} levels deep: not a config")
        self._seen.add(id(node))
        self._active.add(id(node))
        try:
            if node.id == "mapping":
                return self._mapping(node, path)
            if node.id == "sequence":
                items: list[Any] = []
                for i, item in enumerate(cast(list[Node], node.value)):
                    self.doc.origins[(*path, i)] = self.origin_at(item)
                    items.append(self.build(item, (*path, i)))
                return items
            return self._scalar(node, path)
        finally:
            self._active.discard(id(node))

    def _mapping(self, node: Node, path: KeyPath) -> dict[str, Any]:
        out: dict[str, Any] = {}
        first_seen: dict[str, Node] = {}
        for key_node, value_node in cast(list[tuple[Node, Node]], node.value):
            tag = str(key_node.tag)
            if tag == MERGE_TAG:
                message = (
                    "YAML merge keys (<<) are not supported: layer files with include: instead"
                )
                self._problem(key_node, path, message)
                continue
            if key_node.id != "scalar" or tag != STR_TAG:
                shown = quote(key_node.value) if key_node.id == "scalar" else "a non-scalar key"
                self._problem(key_node, path, f"keys must be plain names (strings), got {shown}")
                continue
            key = str(key_node.value)
            if key in first_seen:
                first = self.origin_at(first_seen[key])
                self._problem(
                    key_node,
                    (*path, key),
                    f"duplicate key (already set at line {first.line}); YAML would silently "
                    "keep only the last one: remove one of them",
                    kind="duplicate key",
                )
                continue
            first_seen[key] = key_node
            self.doc.origins[(*path, key)] = self.origin_at(key_node)
            out[key] = self.build(value_node, (*path, key))
        return out

    def _scalar(self, node: Node, path: KeyPath) -> Any:
        text, tag = str(node.value), str(node.tag)
        if tag in (STR_TAG, TIMESTAMP_TAG):  # YAML 1.2 has no dates: `2024-01-01` is text
            return text
        if tag not in _VALUE_TAGS:
            self._problem(node, path, f"unsupported YAML tag {tag} (plain values only)")
            return None
        try:
            value = self._scalars.yaml_constructors[tag](self._scalars, node)
        except (ValueError, YAMLError) as exc:
            what = tag.removeprefix(_TAG)
            self._problem(node, path, f"cannot read {quote(text)} as {what}: {exc}")
            return None
        if not node.style:  # a plain scalar: keep its text for string fields
            self.doc.raw[path] = text
        return value


def parse_yaml(text: str, origin_at: OriginAt, problems: list[Problem]) -> YamlDoc | None:
    """Parse one YAML document. `origin_at(line, column)` (1-based) makes origins.

    Appends problems (syntax errors with their line and column, duplicate keys, bad tags) to
    `problems`. Returns None for a syntax error or an empty document; otherwise the document (with
    whatever could be built where values had problems).
    """
    yaml, whole = YAML(typ="safe", pure=True), origin_at(None, None)
    try:
        node: Node | None = cast(Any, yaml).compose(text)
    except RecursionError:  # ruamel's composer recurses once per level
        problems.append(Problem("YAML nested too deeply to read", origin=whole))
        return None
    except MarkedYAMLError as exc:
        mark: Any = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (None, None)
        parts: tuple[Any, ...] = (getattr(exc, "context", None), getattr(exc, "problem", None))
        what = " ".join(str(part) for part in parts if part)
        where = f" (column {column})" if column is not None else ""
        problems.append(Problem(f"YAML syntax error{where}: {what}", None, origin_at(line, column)))
        return None
    except YAMLError as exc:
        problems.append(Problem(f"YAML error: {exc}", origin=whole))
        return None
    if node is None:
        return None
    builder = _Builder(origin_at, problems, yaml.constructor)
    builder.doc.origins[()] = whole
    try:
        builder.doc.data = builder.build(node, ())
    except _Refused as exc:
        problems.append(Problem(str(exc), origin=whole))
        return None
    return builder.doc


def _read_text(path: Path, problems: list[Problem], key: str | None, via: Origin) -> str | None:
    shown = display_path(path)
    try:
        with path.open("rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
        if len(data) <= MAX_FILE_BYTES:
            return data.decode("utf-8").removeprefix("\ufeff")
        message = f"{shown} is larger than {MAX_FILE_BYTES // 2**20} MiB: not a config file"
    except FileNotFoundError:
        message = f"file not found: {shown}"
    except IsADirectoryError:
        message = f"{shown} is a directory, not a YAML file"
    except UnicodeDecodeError as exc:
        message = f"{shown} is not UTF-8 text (bad byte at offset {exc.start})"
    except OSError as exc:  # a symlink loop, no permission, a path through a file
        message = f"cannot read {shown}: {exc.strerror or exc}"
    problems.append(Problem(message, key=key, origin=via))
    return None


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
    text = _read_text(path, problems, key, file_origin)
    if text is None:
        return None
    before = len(problems)
    doc = parse_yaml(text, lambda line, column: Origin.in_file(path, line, column), problems)
    if doc is None:
        if len(problems) > before:
            return None  # a syntax error, reported
        message = f"{shown} is empty (only comments or blank); expected a mapping of keys"
    elif (top := as_mapping(doc.data)) is None:
        kind = "a list" if as_list(doc.data) is not None else f"the value {quote(doc.data)}"
        message = (
            f"the top level of {shown} must be a mapping of keys (key: value lines), not {kind}"
        )
        file_origin = Origin.in_file(path, 1)
    elif not top:
        message = f"{shown} holds an empty mapping; expected keys"
    else:
        return doc
    problems.append(Problem(message, key=key, origin=file_origin))
    return None


# ---- Trees with origins (merging layers) --------------------------------------------------------------------------
def dotted(path: Sequence[str | int]) -> str:
    return ".".join(str(p) for p in path)


def key_paths(value: Any, at: KeyPath = ()) -> list[KeyPath]:
    """`at` and the key path of everything inside `value`."""
    mapping, items = as_mapping(value), as_list(value)
    children = mapping.items() if mapping is not None else enumerate(items or [])
    return [at, *(p for key, child in children for p in key_paths(child, (*at, key)))]


def replace_subtree(dst: YamlDoc, src: YamlDoc, dst_at: KeyPath, src_at: KeyPath, old: Any) -> None:
    """Where `dst` now holds src's value at `src_at` (was `old`), take src's origins and texts.

    Walks the old and the new value only, so that merging stays linear in the size of the files.
    """
    old_paths, new_paths = key_paths(old), key_paths(value_at(src.data, src_at))

    def move(store: dict[KeyPath, Any], incoming: dict[KeyPath, Any]) -> None:
        for path in old_paths:
            store.pop(dst_at + path, None)
        for path in new_paths:
            if src_at + path in incoming:
                store[dst_at + path] = incoming[src_at + path]

    move(dst.origins, src.origins)
    move(dst.raw, src.raw)


def value_at(data: Any, path: KeyPath) -> Any:
    for part in path:
        data = data[part]
    return data


def merge(dst: YamlDoc, src: YamlDoc, dst_at: KeyPath = (), src_at: KeyPath = ()) -> None:
    """Deep-merge the mapping in `src` at `src_at` over the one in `dst` at `dst_at`.

    Mappings merge key by key; anything else (lists included) replaces; an empty value (null) over a
    mapping leaves the mapping as it was.
    """
    target: dict[str, Any] = value_at(dst.data, dst_at)
    for key, value in cast(dict[str, Any], value_at(src.data, src_at)).items():
        dpath, spath = (*dst_at, key), (*src_at, key)
        current = as_mapping(target.get(key))
        if current is not None and value is None:
            continue  # `train:` with every line below commented out changes nothing
        if current is not None and as_mapping(value) is not None:
            merge(dst, src, dpath, spath)
            dst.origins.setdefault(dpath, src.origins.get(spath, Origin.default("merged")))
        else:
            old = target.get(key)
            target[key] = copy.deepcopy(cast(object, value))
            replace_subtree(dst, src, dpath, spath, old)


def drop_key(doc: YamlDoc, key: str) -> tuple[Any, Origin | None]:
    """Remove a top-level key (and its origins) from a document; return its value and origin."""
    value = doc.data.pop(key, None)
    origin = doc.origins.get((key,))
    for store in (doc.origins, doc.raw):
        for k in [k for k in store if k[:1] == (key,)]:
            del store[k]
    return value, origin
