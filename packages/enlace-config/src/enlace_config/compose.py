"""Composing a run from YAML layers, applying overrides, validating, and saying what went wrong.

Order, last wins: the layers named under `include:` (each after the layers it includes itself), the
keys written in the run file (deep-merged over the layers), the command-line overrides `a.b=c`,
then the defaults of `run.name` (the run file's stem) and `run.out_dir` (`runs/<run.name>`), then
the schema's defaults. Every value keeps where it came from, and every problem is collected before
anything is raised, so one ConfigError lists them all.
"""

import copy
import difflib
import re
import types
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar, Union, cast, get_args, get_origin, overload

from pydantic import BaseModel, ValidationError

from enlace_config.errors import ConfigError, Origin, Problem, display_path
from enlace_config.registry import RUNS_FOLDER, known_folders, schema_for
from enlace_config.schema.base import FieldProblem, FieldProblems
from enlace_config.schema.run import RunConfig
from enlace_config.yamlio import (
    KeyPath,
    YamlDoc,
    as_list,
    as_mapping,
    dump_scalar,
    parse_yaml,
    read_yaml_file,
)

CONFIGS_DIRNAME = "configs"
INCLUDE_KEY = "include"
# The layer slots of a run file: every section of RunConfig except `run` itself.
SLOTS: tuple[str, ...] = tuple(name for name in RunConfig.model_fields if name != "run")

M = TypeVar("M", bound=BaseModel)


# --------------------------------------------------------------------------------------------
# Where files are


def find_configs_root(path: Path) -> Path:
    """The configs root include paths are read from.

    The nearest folder named `configs` above the file; failing that `./configs` when it exists
    (a run file kept elsewhere can still include the shared layers); failing that the file's own
    folder.
    """
    resolved = path.resolve()
    for parent in resolved.parents:
        if parent.name == CONFIGS_DIRNAME:
            return parent
    cwd_configs = Path.cwd() / CONFIGS_DIRNAME
    if cwd_configs.is_dir():
        return cwd_configs
    return resolved.parent


def _configs_ancestor(path: Path) -> Path | None:
    for parent in path.resolve().parents:
        if parent.name == CONFIGS_DIRNAME:
            return parent
    return None


def _folder_under(path: Path, root: Path) -> str | None:
    """The first folder of `path` below `root` (`model` for configs/model/x.yaml), if any."""
    try:
        parts = path.resolve().relative_to(root.resolve()).parts
    except ValueError:
        return None
    return parts[0] if len(parts) > 1 else None


def kind_of(path: Path) -> str | None:
    """A config file's kind: the folder under `configs/` it lives in (`runs`, `model`, ...).

    None for a file that is not under a folder named `configs` (it is then read as a run file).
    """
    root = _configs_ancestor(path)
    return _folder_under(path, root) if root is not None else None


# --------------------------------------------------------------------------------------------
# Trees with origins


def _dotted(path: Sequence[str | int]) -> str:
    return ".".join(str(p) for p in path)


def _starts_with(path: KeyPath, prefix: KeyPath) -> bool:
    return path[: len(prefix)] == prefix


def _replace_subtree(
    dst: dict[KeyPath, Any], src: dict[KeyPath, Any], dst_at: KeyPath, src_at: KeyPath
) -> None:
    for key in [k for k in dst if _starts_with(k, dst_at)]:
        del dst[key]
    for key, value in src.items():
        if _starts_with(key, src_at):
            dst[dst_at + key[len(src_at) :]] = value


def _merge_dict(
    target: dict[str, Any],
    source: dict[str, Any],
    dst: YamlDoc,
    src: YamlDoc,
    dst_at: KeyPath,
    src_at: KeyPath,
) -> None:
    for key, value in source.items():
        dpath, spath = (*dst_at, key), (*src_at, key)
        current, incoming = as_mapping(target.get(key)), as_mapping(value)
        if current is not None and value is None:
            continue  # `train:` with every line below commented out changes nothing
        if current is not None and incoming is not None:
            _merge_dict(current, incoming, dst, src, dpath, spath)
            dst.origins.setdefault(dpath, src.origins.get(spath, Origin.default("merged")))
        else:
            target[key] = copy.deepcopy(cast(object, value))
            _replace_subtree(dst.origins, src.origins, dpath, spath)
            _replace_subtree(dst.raw, src.raw, dpath, spath)


def _merge_doc(dst: YamlDoc, src: YamlDoc) -> None:
    """Deep-merge the mapping `src.data` over `dst.data`.

    Mappings merge key by key; anything else (lists included) replaces; an empty value (null) over a
    mapping leaves the mapping as it was.
    """
    _merge_dict(dst.data, src.data, dst, src, (), ())


def _drop_key(doc: YamlDoc, key: str) -> tuple[Any, Origin | None]:
    """Remove a top-level key (and its origins) from a document; return its value and origin."""
    value = doc.data.pop(key, None)
    origin = doc.origins.get((key,))
    for store in (doc.origins, doc.raw):
        for k in [k for k in store if k[:1] == (key,)]:
            del store[k]
    return value, origin


# --------------------------------------------------------------------------------------------
# Schema walking


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation (`Model`, `Model | None`, `list[Model]`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _model_at(schema: type[BaseModel], loc: Sequence[str | int]) -> type[BaseModel] | None:
    model: type[BaseModel] | None = schema
    for part in loc:
        if model is None:
            return None
        if isinstance(part, int):
            continue  # a list item: same model as the list's items
        info = model.model_fields.get(part)
        model = _model_in(info.annotation) if info is not None else None
    return model


def _did_you_mean(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _unknown_key_message(name: str, choices: Sequence[str]) -> str:
    hint = _did_you_mean(name, choices)
    if hint:
        return f"unknown key{hint}"
    return f"unknown key (the keys here are: {', '.join(choices)})"


def _check_override_path(schema: type[BaseModel], path: Sequence[str]) -> str | None:
    """Why `path` names no key of `schema` (None when it does)."""
    model: type[BaseModel] | None = schema
    for i, part in enumerate(path):
        if model is None:
            return f"{_dotted(path[:i])} is a value, not a section: nothing below it to set"
        names = list(model.model_fields)
        if part not in names:
            where = f" in {_dotted(path[:i])}" if i else ""
            hint = _did_you_mean(part, names)
            return f"unknown key {part!r}{where}{hint or ' (keys here: ' + ', '.join(names) + ')'}"
        info = model.model_fields[part]
        model = _model_in(info.annotation)
        if model is not None and get_origin(info.annotation) is list:
            model = None  # no overrides inside list items: override the whole list
    return None


def _wants_text(annotation: Any) -> bool:
    """A field that takes text and no number or boolean: `str`, `str | None`."""
    if annotation is str:
        return True
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        return args == [str]
    return False


def _numbers_to_text(data: Any, schema: type[BaseModel], doc: YamlDoc, at: KeyPath) -> None:
    """Plain scalars read as numbers or booleans, given to a text field, take their text back.

    `run.name: 2060` means the name "2060"; YAML alone would make it an int, which pydantic
    (rightly, in general) refuses for a str field.
    """
    mapping = as_mapping(data)
    if mapping is None:
        return
    for key, value in mapping.items():
        info = schema.model_fields.get(key)
        if info is None:
            continue
        path = (*at, key)
        if (
            isinstance(value, bool | int | float)
            and path in doc.raw
            and _wants_text(info.annotation)
        ):
            mapping[key] = doc.raw[path]
            continue
        sub = _model_in(info.annotation)
        if sub is None:
            continue
        items = as_list(value)
        if items is not None:
            for i, item in enumerate(items):
                _numbers_to_text(item, sub, doc, (*path, i))
        else:
            _numbers_to_text(value, sub, doc, path)


# --------------------------------------------------------------------------------------------
# Validation errors, translated


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _origin_for(doc: YamlDoc, loc: Sequence[str | int]) -> Origin | None:
    path = tuple(loc)
    while path:
        if path in doc.origins:
            return doc.origins[path]
        path = path[:-1]
    return doc.origins.get(())


_EXPECTED_REWRITES = (
    (r"^Input should be ", "expected "),
    (r"^String should match pattern ", "expected text matching the pattern "),
    (r"^(?:String|List|Dictionary|Value) should (?:have|be) ", "expected "),
)


def _expected(msg: str) -> str:
    """pydantic's message phrased as what was expected ("Input should be ..." -> "expected ...")."""
    msg = msg.removeprefix("Value error, ")
    for pattern, replacement in _EXPECTED_REWRITES:
        msg, n = re.subn(pattern, replacement, msg)
        if n:
            break
    return msg


def _reading_order(problems: Sequence[Problem]) -> list[Problem]:
    """Problems in files first (files in order of first mention, by line), then overrides."""
    groups: dict[str, int] = {}
    rank = {"file": 0, "override": 1, "default": 2}

    def key(problem: Problem) -> tuple[int, int, int]:
        origin = problem.origin
        if origin is None:
            return (0, groups.setdefault("", len(groups)), 0)
        group = str(origin.file) if origin.kind == "file" else origin.kind
        return (rank[origin.kind], groups.setdefault(group, len(groups)), origin.line or 0)

    return sorted(problems, key=key)


def _field_problem(fp: FieldProblem, loc: KeyPath, doc: YamlDoc) -> Problem:
    path = (*loc, *fp.key.split("."))
    related = tuple(
        (_dotted((*loc, *r.split("."))), _origin_for(doc, (*loc, *r.split("."))))
        for r in fp.related
    )
    return Problem(fp.message, key=_dotted(path), origin=_origin_for(doc, path), related=related)


def _cross_section_problems(exc: ValidationError, doc: YamlDoc) -> list[Problem]:
    """RunConfig's checks across sections, on the sections that are valid on their own.

    pydantic runs a model validator only when every field validated, so one bad section would hide
    a batch/micro-batch mismatch between two good ones until the next run.
    """
    failed = {err["loc"][0] for err in exc.errors() if err["loc"]}
    if not failed:
        return []  # every section was valid: the cross-section checks already ran
    data = as_mapping(doc.data) or {}
    sections: dict[str, object] = {}
    for name, info in RunConfig.model_fields.items():
        model = _model_in(info.annotation)
        if name in failed or name not in data or model is None:
            continue
        try:
            sections[name] = model.model_validate(data[name])
        except ValidationError:
            continue
    return [_field_problem(fp, (), doc) for fp in RunConfig.cross_section_problems(sections)]


def _translate(
    exc: ValidationError,
    schema: type[BaseModel],
    doc: YamlDoc,
    skip: Sequence[KeyPath] = (),
) -> list[Problem]:
    problems: list[Problem] = []
    for err in exc.errors(include_url=False):
        loc: KeyPath = tuple(err["loc"])
        if any(_starts_with(loc, prefix) for prefix in skip):
            continue  # a layer that failed to load: its problem is already reported
        ctx: dict[str, Any] = err.get("ctx") or {}
        cause = ctx.get("error")
        if err["type"] == "value_error" and isinstance(cause, FieldProblems):
            problems.extend(_field_problem(fp, loc, doc) for fp in cause.problems)
            continue
        key = _dotted(loc) or None
        origin = _origin_for(doc, loc)
        etype = err["type"]
        if etype == "extra_forbidden":
            parent = _model_at(schema, loc[:-1])
            names = list(parent.model_fields) if parent is not None else []
            message = _unknown_key_message(str(loc[-1]), names)
        elif etype == "missing":
            parent = _model_at(schema, loc[:-1])
            info = parent.model_fields.get(str(loc[-1])) if parent is not None else None
            described = f" ({info.description})" if info is not None and info.description else ""
            message = f"missing: this key is required{described}"
            if schema is RunConfig and len(loc) == 1 and loc[0] in SLOTS:
                message += (
                    f"; name a layer under include: (`{loc[0]}: {loc[0]}/<file>.yaml`) or write "
                    "the section in the run file"
                )
        else:
            message = f"got {_show(err.get('input'))}: {_expected(err['msg'])}"
            if etype == "literal_error":
                choices = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
                message += _did_you_mean(str(err.get("input")), choices)
        problems.append(Problem(message, key=key, origin=origin))
    return problems


# --------------------------------------------------------------------------------------------
# Layers


def _missing_file_hint(target: str, root: Path, slot: str) -> str:
    folder = root / slot
    if not folder.is_dir():
        return ""
    candidates = sorted(f"{slot}/{p.name}" for p in folder.glob("*.yaml"))
    close = difflib.get_close_matches(target, candidates, n=1, cutoff=0.5)
    return f" (did you mean {close[0]}?)" if close else ""


def _load_layer(
    path: Path,
    slot: str,
    root: Path,
    chain: tuple[Path, ...],
    problems: list[Problem],
    *,
    key: str | None,
    via: Origin | None,
) -> YamlDoc | None:
    """Read a layer file of kind `slot`, itself composed over the layer it includes."""
    resolved = path.resolve()
    if resolved in chain:
        cycle = " -> ".join(display_path(p) for p in (*chain, resolved))
        problems.append(Problem(f"include cycle: {cycle}", key=key, origin=via))
        return None
    folder = _folder_under(resolved, root)
    if folder is not None and folder != slot and folder in known_folders():
        if folder == RUNS_FOLDER:
            why = "it is a run file, not a layer: a run file cannot be included"
        else:
            why = (
                f"it is a {folder} layer (it lives in {CONFIGS_DIRNAME}/{folder}/), included here "
                f"as {slot}: include it as `{folder}: ...`, or name a file from "
                f"{CONFIGS_DIRNAME}/{slot}/"
            )
        problems.append(Problem(f"wrong slot for {display_path(path)}: {why}", key=key, origin=via))
        return None
    before = len(problems)
    doc = read_yaml_file(path, problems, key=key, via=via)
    if doc is None:
        if via is not None and not path.exists() and len(problems) == before + 1:
            target = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
            last = problems[-1]
            problems[-1] = Problem(
                last.message + _missing_file_hint(target, root, slot), last.key, last.origin
            )
        return None
    include, include_origin = _drop_key(doc, INCLUDE_KEY)
    if include is None:
        return doc
    as_slot_map = as_mapping(include)
    if as_slot_map is not None and list(as_slot_map) == [slot]:
        include = as_slot_map[slot]
    if not isinstance(include, str) or not include:
        problems.append(
            Problem(
                f"in a {slot} layer, include names one {slot} file, as a path from the configs "
                f"root (e.g. `include: {slot}/base.yaml`); got {_show(include)}",
                key=INCLUDE_KEY,
                origin=include_origin,
            )
        )
        return None
    base = _load_layer(
        root / include,
        slot,
        root,
        (*chain, resolved),
        problems,
        key=INCLUDE_KEY,
        via=include_origin,
    )
    if base is None:
        return None
    _merge_doc(base, doc)
    base.origins[()] = Origin.in_file(path)
    return base


# --------------------------------------------------------------------------------------------
# Overrides


def _apply_overrides(
    doc: YamlDoc, overrides: Sequence[str], schema: type[BaseModel], problems: list[Problem]
) -> None:
    for text in overrides:
        origin = Origin.override(text)
        name, sep, value_text = text.partition("=")
        name = name.strip()
        if not sep:
            problems.append(
                Problem(
                    "an override is key=value (e.g. train.lr=3e-4 or run.name=test); this one "
                    "has no '='",
                    origin=origin,
                )
            )
            continue
        path = tuple(name.split("."))
        if not name or any(not part for part in path):
            problems.append(
                Problem(
                    f"{name!r} is not a dotted key path (like train.lr)", key=name, origin=origin
                )
            )
            continue
        why = _check_override_path(schema, path)
        if why is not None:
            problems.append(Problem(why, key=name, origin=origin))
            continue
        value_problems: list[Problem] = []
        parsed = parse_yaml(value_text, lambda _line, _col, o=origin: o, value_problems)
        if value_problems:
            problems.extend(
                Problem(
                    f"cannot read the value {value_text!r}: {p.message}", key=name, origin=origin
                )
                for p in value_problems
            )
            continue
        # The override as a one-key document, merged like a run file's keys: `hardware={compile:
        # true}` merges into the hardware section, a scalar replaces.
        nested: Any = parsed.data if parsed is not None else None
        for part in reversed(path):
            nested = {part: nested}
        single = YamlDoc(data=nested)
        for i in range(1, len(path) + 1):
            single.origins[path[:i]] = origin
        if parsed is not None:
            single.origins.update({(*path, *k): o for k, o in parsed.origins.items()})
            single.raw.update({(*path, *k): r for k, r in parsed.raw.items()})
        _merge_doc(doc, single)


# --------------------------------------------------------------------------------------------
# Results


def _leaf_origins(data: Any, doc: YamlDoc, at: KeyPath, out: dict[str, Origin]) -> None:
    mapping = as_mapping(data)
    if mapping:
        for key, value in mapping.items():
            _leaf_origins(value, doc, (*at, key), out)
        return
    out[_dotted(at)] = doc.origins.get(at, Origin.default("schema default"))


def _emit(
    data: dict[str, Any], origins: dict[str, Origin] | None, indent: int, at: str
) -> list[str]:
    lines: list[str] = []
    pad = "  " * indent
    for key, value in data.items():
        dotted = f"{at}.{key}" if at else key
        section = as_mapping(value)
        if section:
            lines.append(f"{pad}{key}:")
            lines.extend(_emit(section, origins, indent + 1, dotted))
            continue
        line = f"{pad}{key}: {dump_scalar(value)}"
        if origins is not None and dotted in origins:
            line += f"  # {origins[dotted]}"
        lines.append(line)
    return lines


@dataclass(frozen=True)
class LoadedConfig(Generic[M]):
    """A validated config and where each of its values came from.

    `origins` maps every dotted leaf key (`train.lr`) to its Origin: a file and line, a
    command-line override, or a default.
    """

    config: M
    origins: dict[str, Origin]
    source: Path
    overrides: tuple[str, ...] = ()
    kind: str = field(default=RUNS_FOLDER)

    def to_dict(self) -> dict[str, Any]:
        """The resolved config as plain JSON-compatible data (what a run records)."""
        return self.config.model_dump(mode="json")

    def origins_as_text(self) -> dict[str, str]:
        """`origins` as strings, for JSON (checkpoints, metrics)."""
        return {key: str(origin) for key, origin in self.origins.items()}

    def to_yaml(self, *, with_origins: bool = False) -> str:
        """The resolved config as YAML that reads back to the same values.

        with_origins: a comment after each value saying where it came from.
        """
        header = [f"# Resolved by enlace-config from {display_path(self.source)}"]
        if self.overrides:
            header.append("# with overrides: " + " ".join(self.overrides))
        body = _emit(self.to_dict(), self.origins if with_origins else None, 0, "")
        return "\n".join([*header, *body]) + "\n"


class ResolvedConfig(LoadedConfig[RunConfig]):
    """A composed and validated run: `.config` is the RunConfig."""


def _as_list(overrides: Sequence[str]) -> list[str]:
    return [overrides] if isinstance(overrides, str) else list(overrides)


def _validate(
    schema: type[M], doc: YamlDoc, problems: list[Problem], skip: Sequence[KeyPath]
) -> M | None:
    _numbers_to_text(doc.data, schema, doc, ())
    try:
        return schema.model_validate(doc.data)
    except ValidationError as exc:
        problems.extend(_translate(exc, schema, doc, skip))
        if schema is RunConfig:
            problems.extend(_cross_section_problems(exc, doc))
        return None


def load_run_config(
    path: str | Path, overrides: Sequence[str] = (), *, configs_root: str | Path | None = None
) -> ResolvedConfig:
    """Compose, override, default and validate a run file. Raises ConfigError listing everything.

    configs_root: where include paths are read from (default: see `find_configs_root`).
    """
    path = Path(path)
    overrides = _as_list(overrides)
    problems: list[Problem] = []
    subject = display_path(path)
    run_doc = read_yaml_file(path, problems)
    if run_doc is None:
        raise ConfigError(problems, subject)
    root = Path(configs_root) if configs_root is not None else find_configs_root(path)

    tree = YamlDoc(data={}, origins={(): Origin.in_file(path)})
    failed: list[KeyPath] = []
    line_origins = {
        str(k[1]): o for k, o in run_doc.origins.items() if len(k) == 2 and k[0] == INCLUDE_KEY
    }
    include, include_origin = _drop_key(run_doc, INCLUDE_KEY)
    slots = as_mapping(include)
    if include is not None and slots is None:
        problems.append(
            Problem(
                "include in a run file maps slots to layer files, one per line "
                f"(`model: model/smoke.yaml`; slots: {', '.join(SLOTS)}); got {_show(include)}",
                key=INCLUDE_KEY,
                origin=include_origin,
            )
        )
    elif slots is not None:
        for slot, target in slots.items():
            inc_key = f"{INCLUDE_KEY}.{slot}"
            line_origin = line_origins.get(slot, include_origin)
            if slot not in SLOTS:
                problems.append(
                    Problem(
                        f"unknown slot{_did_you_mean(slot, SLOTS) or ''}; the slots are "
                        f"{', '.join(SLOTS)}",
                        key=inc_key,
                        origin=line_origin,
                    )
                )
                continue
            if not isinstance(target, str) or not target:
                problems.append(
                    Problem(
                        f"expected a path from the configs root like {slot}/<name>.yaml, got "
                        f"{_show(target)}",
                        key=inc_key,
                        origin=line_origin,
                    )
                )
                failed.append((slot,))
                continue
            layer = _load_layer(
                root / target, slot, root, (), problems, key=inc_key, via=line_origin
            )
            if layer is None:
                failed.append((slot,))
                continue
            tree.data[slot] = layer.data
            _replace_subtree(tree.origins, layer.origins, (slot,), ())
            _replace_subtree(tree.raw, layer.raw, (slot,), ())

    _merge_doc(tree, run_doc)
    _apply_overrides(tree, overrides, RunConfig, problems)
    _default_run_section(tree, path)
    config = _validate(RunConfig, tree, problems, failed)
    if problems or config is None:
        raise ConfigError(_reading_order(problems), _subject(subject, overrides))
    origins: dict[str, Origin] = {}
    resolved = ResolvedConfig(config, origins, path, tuple(overrides), RUNS_FOLDER)
    _leaf_origins(resolved.to_dict(), tree, (), origins)
    return resolved


def _subject(subject: str, overrides: Sequence[str]) -> str:
    return (
        f"{subject} (with {len(overrides)} override{'s' if len(overrides) != 1 else ''})"
        if overrides
        else subject
    )


def _default_run_section(tree: YamlDoc, path: Path) -> None:
    if tree.data.get("run") is None:
        tree.data["run"] = {}
        tree.origins[("run",)] = Origin.default("run section")
    run = as_mapping(tree.data["run"])
    if run is None:
        return  # validation reports it
    if "name" not in run:
        run["name"] = path.stem
        tree.origins[("run", "name")] = Origin.default("the run file's name")
    name = run["name"]
    if "out_dir" not in run and isinstance(name, str | int | float):
        run["out_dir"] = f"runs/{tree.raw.get(('run', 'name'), name)}"
        tree.origins[("run", "out_dir")] = Origin.default("runs/<run.name>")


@overload
def load_config(
    path: str | Path,
    overrides: Sequence[str] = (),
    *,
    schema: type[M],
    configs_root: str | Path | None = None,
) -> LoadedConfig[M]: ...


@overload
def load_config(
    path: str | Path,
    overrides: Sequence[str] = (),
    *,
    schema: None = None,
    configs_root: str | Path | None = None,
) -> LoadedConfig[BaseModel]: ...


def load_config(
    path: str | Path,
    overrides: Sequence[str] = (),
    *,
    schema: type[BaseModel] | None = None,
    configs_root: str | Path | None = None,
) -> LoadedConfig[Any]:
    """Load a config file of another kind (a layer, a corpus or agent file) and validate it.

    The schema is chosen by the folder under `configs/` the file lives in (see the registry) unless
    given. The file may include one file of its own kind (`include: model/base.yaml`); overrides
    name keys of the file itself (`d_model=256` for a model layer). A layer validates as a complete
    section: a partial layer must include the layer it modifies.
    """
    path = Path(path)
    overrides = _as_list(overrides)
    kind = kind_of(path) or path.parent.name
    model = schema if schema is not None else schema_for(kind, path.stem)
    if model is None:
        raise ConfigError(
            [
                Problem(
                    f"no schema for files in {CONFIGS_DIRNAME}/{kind}/ (known folders: "
                    f"{', '.join(known_folders())}); a package that adds a kind of config "
                    "registers it in enlace_config.registry",
                    origin=Origin.in_file(path),
                )
            ],
            display_path(path),
        )
    root = Path(configs_root) if configs_root is not None else find_configs_root(path)
    problems: list[Problem] = []
    doc = _load_layer(path, kind, root, (), problems, key=None, via=None)
    if doc is None:
        raise ConfigError(problems, display_path(path))
    _apply_overrides(doc, overrides, model, problems)
    config = _validate(model, doc, problems, ())
    if problems or config is None:
        raise ConfigError(_reading_order(problems), _subject(display_path(path), overrides))
    origins: dict[str, Origin] = {}
    loaded = LoadedConfig(config, origins, path, tuple(overrides), kind)
    _leaf_origins(loaded.to_dict(), doc, (), origins)
    return loaded


def check_file(path: str | Path) -> LoadedConfig[Any]:
    """Validate one config file with the schema its location calls for (what `check` runs).

    Files under `configs/runs/`, and files outside any `configs/` folder, are run files; files in
    another folder of `configs/` are validated with that folder's registered schema.
    """
    path = Path(path)
    kind = kind_of(path)
    if kind is None or kind == RUNS_FOLDER:
        return load_run_config(path)
    return load_config(path)
