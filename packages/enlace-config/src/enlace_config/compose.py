"""Composing a run from YAML layers, applying overrides, validating, and saying what went wrong.

Order, last wins: the layers named under `include:` (each after the layers it includes itself), the
keys written in the run file (deep-merged over the layers), the command-line overrides `a.b=c`,
then the defaults of `run.name` (the run file's stem) and `run.out_dir` (`runs/<run.name>`), then
the schema's defaults. Every value keeps where it came from, and every problem is collected before
anything is raised, so one ConfigError lists them all.
"""

import contextlib
import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Generic, TypeVar, overload

from pydantic import BaseModel, ValidationError

from enlace_config.errors import (
    MAX_OF_A_KIND,
    ConfigError,
    Origin,
    Problem,
    display_path,
    names_secret,
    quote,
    resolved,
)
from enlace_config.registry import RUNS_FOLDER, known_folders, schema_for
from enlace_config.schema.base import FieldProblem, FieldProblems
from enlace_config.schema.run import RunConfig
from enlace_config.schema_keys import (
    check_override_path,
    did_you_mean,
    model_at,
    model_in,
    unknown_key_message,
)
from enlace_config.yamlio import (
    KeyPath,
    YamlDoc,
    as_mapping,
    dotted,
    drop_key,
    dump_scalar,
    merge,
    parse_yaml,
    read_yaml_file,
    replace_subtree,
    value_at,
)

CONFIGS_DIRNAME = "configs"
INCLUDE_KEY = "include"
LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"  # what str.splitlines() splits at
# The layer slots of a run file: every section of RunConfig except `run` itself.
SLOTS: tuple[str, ...] = tuple(name for name in RunConfig.model_fields if name != "run")

M = TypeVar("M", bound=BaseModel)


# ---- Where files are -----------------------------------------------------------------------------
def find_configs_root(path: Path) -> Path:
    """The configs root include paths are read from: the nearest folder named `configs` above the
    file; failing that `./configs` when it exists (a run file kept elsewhere can still include the
    shared layers); failing that the file's own folder."""
    if (ancestor := _configs_ancestor(path)) is not None:
        return ancestor
    cwd_configs = Path.cwd() / CONFIGS_DIRNAME
    return cwd_configs if cwd_configs.is_dir() else resolved(path).parent


def _configs_ancestor(path: Path) -> Path | None:
    return next((p for p in resolved(path).parents if p.name == CONFIGS_DIRNAME), None)


def _folder_under(path: Path, root: Path) -> str | None:
    """The first folder of `path` below `root` (`model` for configs/model/x.yaml), if any."""
    try:
        parts = resolved(path).relative_to(resolved(root)).parts
    except ValueError:
        return None
    return parts[0] if len(parts) > 1 else None


def kind_of(path: Path) -> str | None:
    """A config file's kind: the folder under `configs/` it lives in (`runs`, `model`, ...); None
    outside a folder named `configs` (the file is then read as a run file)."""
    root = _configs_ancestor(path)
    return _folder_under(path, root) if root is not None else None


# ---- Validation errors, translated ---------------------------------------------------------------
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
    key, *related = ((*loc, *k.split(".")) for k in (fp.key, *fp.related))
    with_origins = tuple((dotted(r), _origin_for(doc, r)) for r in related)
    return Problem(fp.message, dotted(key), _origin_for(doc, key), with_origins)


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
        model = model_in(info.annotation)
        if name not in failed and name in data and model is not None:
            with contextlib.suppress(ValidationError):
                sections[name] = model.model_validate(data[name])
    return [_field_problem(fp, (), doc) for fp in RunConfig.cross_section_problems(sections)]


def _translate(
    exc: ValidationError,
    schema: type[BaseModel],
    doc: YamlDoc,
    skip: Sequence[KeyPath] = (),
) -> list[Problem]:
    problems: list[Problem] = []
    unknown = 0
    for err in exc.errors(include_url=False):
        loc: KeyPath = tuple(err["loc"])
        if any(loc[: len(prefix)] == prefix for prefix in skip):
            continue  # a layer that failed to load: its problem is already reported
        ctx: dict[str, Any] = err.get("ctx") or {}
        cause = ctx.get("error")
        if err["type"] == "value_error" and isinstance(cause, FieldProblems):
            problems.extend(_field_problem(fp, loc, doc) for fp in cause.problems)
            continue
        etype, parent = err["type"], model_at(schema, loc[:-1])
        if etype == "extra_forbidden":
            names = list(parent.model_fields) if parent is not None else []
            unknown += 1  # past the ones listed, no hint: difflib on thousands takes seconds
            hinted = unknown <= MAX_OF_A_KIND
            message = unknown_key_message(str(loc[-1]), names) if hinted else "unknown key"
        elif etype == "missing":
            info = parent.model_fields.get(str(loc[-1])) if parent is not None else None
            described = f" ({info.description})" if info is not None and info.description else ""
            message = f"missing: this key is required{described}"
            if schema is RunConfig and len(loc) == 1 and loc[0] in SLOTS:
                message += (
                    f"; name a layer under include: (`{loc[0]}: {loc[0]}/<file>.yaml`) or write "
                    "the section in the run file"
                )
        else:
            secret = names_secret(dotted(loc))
            message = f"got {quote(err.get('input'), secret=secret)}: {_expected(err['msg'])}"
            if etype == "literal_error":
                choices = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
                message += did_you_mean(str(err.get("input")), choices)
        kind = "unknown key" if etype == "extra_forbidden" else etype
        problems.append(Problem(message, dotted(loc) or None, _origin_for(doc, loc), kind=kind))
    return problems


# ---- Layers --------------------------------------------------------------------------------------
def _missing_file_hint(path: Path, root: Path, slot: str) -> str:
    target = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
    candidates = sorted(f"{slot}/{p.name}" for p in (root / slot).glob("*.yaml"))
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
    real, folder = resolved(path), _folder_under(path, root)
    why = None
    if real in chain:
        why = "include cycle: " + " -> ".join(display_path(p) for p in (*chain, real))
    elif folder is not None and folder != slot and folder in known_folders():
        why = f"wrong slot for {display_path(path)}: " + (
            "it is a run file, not a layer: a run file cannot be included"
            if folder == RUNS_FOLDER
            else f"it is a {folder} layer (it lives in {CONFIGS_DIRNAME}/{folder}/), included "
            f"here as {slot}: include it as `{folder}: ...`, or name a file from "
            f"{CONFIGS_DIRNAME}/{slot}/"
        )
    if why is not None:
        problems.append(Problem(why, key=key, origin=via))
        return None
    doc = read_yaml_file(path, problems, key=key, via=via)
    if doc is None:
        last = problems[-1]
        if via is not None and last.message.startswith("file not found"):
            problems[-1] = replace(
                last, message=last.message + _missing_file_hint(path, root, slot)
            )
        return None
    include, include_origin = drop_key(doc, INCLUDE_KEY)
    if include is None:
        return doc
    as_slot_map = as_mapping(include)
    if as_slot_map is not None and list(as_slot_map) == [slot]:
        include = as_slot_map[slot]
    if not isinstance(include, str) or not include:
        message = (
            f"in a {slot} layer, include names one {slot} file, as a path from the configs root "
            f"(e.g. `include: {slot}/base.yaml`); got {quote(include)}"
        )
        problems.append(Problem(message, key=INCLUDE_KEY, origin=include_origin))
        return None
    base = _load_layer(
        root / include, slot, root, (*chain, real), problems, key=INCLUDE_KEY, via=include_origin
    )
    if base is not None:
        merge(base, doc)
        base.origins[()] = Origin.in_file(path)
    return base


# ---- Overrides -----------------------------------------------------------------------------------
def _override_error(name: str, has_equals: bool, text: str, schema: type[BaseModel]) -> str | None:
    """Why the override `text` (setting `name`) cannot apply, before its value is read."""
    if not has_equals:
        return "an override is key=value (e.g. train.lr=3e-4 or run.name=test); this one has no '='"
    if any(char in text for char in LINE_BREAKS):
        return (
            "an override is one line, and this one holds a line break: write the value in a file "
            "(overrides are recorded in YAML comments, where a line break would end the comment)"
        )
    if not all(name.split(".")):
        return f"{quote(name)} is not a dotted key path (like train.lr)"
    return check_override_path(schema, name.split("."))


def _apply_overrides(
    doc: YamlDoc, overrides: Sequence[str], schema: type[BaseModel], problems: list[Problem]
) -> None:
    for text in overrides:
        name, equals, value_text = text.partition("=")
        name = name.strip()
        origin = Origin.override(repr(text) if any(c in text for c in LINE_BREAKS) else text)
        why = _override_error(name, bool(equals), text, schema)
        value_problems: list[Problem] = []
        parsed = None if why else parse_yaml(value_text, lambda _l, _c, o=origin: o, value_problems)
        if value_problems:
            why = f"cannot read the value {quote(value_text)}: " + "; ".join(
                p.message for p in value_problems
            )
        if why:
            problems.append(Problem(why, key=name if equals else None, origin=origin))
            continue
        # The override as a one-key document, merged like a run file's keys: `hardware={compile:
        # true}` merges into the hardware section, a scalar replaces.
        path = tuple(name.split("."))
        single = YamlDoc(data=parsed.data if parsed is not None else None)
        if parsed is not None:
            single.origins = {(*path, *k): o for k, o in parsed.origins.items()}
            single.raw = {(*path, *k): r for k, r in parsed.raw.items()}
        for i in reversed(range(len(path))):
            single.data = {path[i]: single.data}
            single.origins[path[: i + 1]] = origin
        merge(doc, single)


# ---- Results -------------------------------------------------------------------------------------
def _leaf_origins(data: Any, doc: YamlDoc, at: KeyPath, out: dict[str, Origin]) -> None:
    mapping = as_mapping(data)
    if mapping:
        for key, value in mapping.items():
            _leaf_origins(value, doc, (*at, key), out)
        return
    out[dotted(at)] = doc.origins.get(at, Origin.default("schema default"))


def _emit(
    data: dict[str, Any], origins: dict[str, Origin] | None, indent: int, at: str
) -> list[str]:
    lines: list[str] = []
    pad = "  " * indent
    for key, value in data.items():
        full = f"{at}.{key}" if at else key
        section = as_mapping(value)
        if section:
            lines.append(f"{pad}{key}:")
            lines.extend(_emit(section, origins, indent + 1, full))
            continue
        line = f"{pad}{key}: {dump_scalar(value)}"
        if origins is not None and full in origins:
            line += f"  # {origins[full]}"
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
    kind: str = RUNS_FOLDER

    def to_dict(self) -> dict[str, Any]:
        """The resolved config as plain JSON-compatible data (what a run records)."""
        return self.config.model_dump(mode="json")

    def origins_as_text(self) -> dict[str, str]:
        """`origins` as strings, for JSON (checkpoints, metrics)."""
        return {key: str(origin) for key, origin in self.origins.items()}

    def to_yaml(self, *, with_origins: bool = False) -> str:
        """The resolved config as YAML that reads back to the same values; with_origins: a comment
        after each value says where it came from."""
        header = [f"# Resolved by enlace-config from {display_path(self.source)}"]
        if self.overrides:
            header.append("# with overrides: " + " ".join(self.overrides))
        body = _emit(self.to_dict(), self.origins if with_origins else None, 0, "")
        return "\n".join([*header, *body]) + "\n"


class ResolvedConfig(LoadedConfig[RunConfig]):
    """A composed and validated run: `.config` is the RunConfig."""


def _validate(
    schema: type[M],
    doc: YamlDoc,
    problems: list[Problem],
    skip: Sequence[KeyPath],
    retry: bool = True,
) -> M | None:
    try:
        return schema.model_validate(doc.data)
    except ValidationError as exc:
        # A plain scalar read as a number or boolean, given to a text field, takes its text back:
        # `run.name: 2060` is the name "2060" (YAML alone makes it an int).
        locs = [tuple(e["loc"]) for e in exc.errors() if e["type"] == "string_type"]
        texts = [loc for loc in locs if loc in doc.raw]
        if retry and texts:
            for loc in texts:
                value_at(doc.data, loc[:-1])[loc[-1]] = doc.raw[loc]
            return _validate(schema, doc, problems, skip, retry=False)
        problems.extend(_translate(exc, schema, doc, skip))
        if schema is RunConfig:
            problems.extend(_cross_section_problems(exc, doc))
        return None


def _include_slots(
    run_doc: YamlDoc, root: Path, problems: list[Problem]
) -> tuple[YamlDoc, list[KeyPath]]:
    """The layers a run file names under `include:`, one per slot; and the slots that failed."""
    tree = YamlDoc(data={}, origins={(): run_doc.origins[()]})
    failed: list[KeyPath] = []
    line_origins = {
        str(k[1]): o for k, o in run_doc.origins.items() if k[:1] == (INCLUDE_KEY,) and len(k) == 2
    }
    include, include_origin = drop_key(run_doc, INCLUDE_KEY)
    slots = as_mapping(include)
    if include is not None and slots is None:
        message = (
            "include in a run file maps slots to layer files, one per line "
            f"(`model: model/smoke.yaml`; slots: {', '.join(SLOTS)}); got {quote(include)}"
        )
        problems.append(Problem(message, key=INCLUDE_KEY, origin=include_origin))
    for slot, target in (slots or {}).items():
        key, origin = f"{INCLUDE_KEY}.{slot}", line_origins.get(slot, include_origin)
        if slot not in SLOTS:
            hint = did_you_mean(slot, SLOTS)
            message = f"unknown slot{hint}; the slots are {', '.join(SLOTS)}"
            problems.append(Problem(message, key=key, origin=origin))
            continue
        layer = None
        if not isinstance(target, str) or not target:
            message = f"expected a path from the configs root like {slot}/<name>.yaml, got "
            problems.append(Problem(message + quote(target), key=key, origin=origin))
        else:
            layer = _load_layer(root / target, slot, root, (), problems, key=key, via=origin)
        if layer is None:
            failed.append((slot,))
            continue
        tree.data[slot] = layer.data
        replace_subtree(tree, layer, (slot,), (), None)
    return tree, failed


def _finish(
    schema: type[M],
    doc: YamlDoc,
    path: Path,
    overrides: Sequence[str],
    problems: list[Problem],
    failed: Sequence[KeyPath] = (),
) -> tuple[M, dict[str, Origin]]:
    """Apply the overrides, validate, and say where each value came from; or raise everything."""
    overrides = [overrides] if isinstance(overrides, str) else list(overrides)
    _apply_overrides(doc, overrides, schema, problems)
    if schema is RunConfig:
        _default_run_section(doc, path)
    config = _validate(schema, doc, problems, failed)
    if problems or config is None:
        n = len(overrides)
        subject = display_path(path) + (f" (with {n} override{'s' * (n != 1)})" if n else "")
        raise ConfigError(_reading_order(problems), subject)
    origins: dict[str, Origin] = {}
    _leaf_origins(config.model_dump(mode="json"), doc, (), origins)
    return config, origins


def load_run_config(
    path: str | Path, overrides: Sequence[str] = (), *, configs_root: str | Path | None = None
) -> ResolvedConfig:
    """Compose, override, default and validate a run file. Raises ConfigError listing everything.
    configs_root: where include paths are read from (default: see `find_configs_root`)."""
    path = Path(path)
    problems: list[Problem] = []
    run_doc = read_yaml_file(path, problems)
    if run_doc is None:
        raise ConfigError(problems, display_path(path))
    root = Path(configs_root) if configs_root is not None else find_configs_root(path)
    tree, failed = _include_slots(run_doc, root, problems)
    merge(tree, run_doc)
    config, origins = _finish(RunConfig, tree, path, overrides, problems, failed)
    return ResolvedConfig(config, origins, path, tuple(overrides), RUNS_FOLDER)


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
    kind = kind_of(path) or path.parent.name
    model = schema if schema is not None else schema_for(kind, path.stem)
    problems: list[Problem] = []
    if model is None:
        message = (
            f"no schema for files in {CONFIGS_DIRNAME}/{kind}/ (known folders: "
            f"{', '.join(known_folders())}); a package that adds a kind of config registers it "
            "in enlace_config.registry"
        )
        raise ConfigError([Problem(message, origin=Origin.in_file(path))], display_path(path))
    root = Path(configs_root) if configs_root is not None else find_configs_root(path)
    doc = _load_layer(path, kind, root, (), problems, key=None, via=None)
    if doc is None:
        raise ConfigError(problems, display_path(path))
    config, origins = _finish(model, doc, path, overrides, problems)
    return LoadedConfig(config, origins, path, tuple(overrides), kind)


def check_file(path: str | Path, overrides: Sequence[str] = ()) -> LoadedConfig[Any]:
    """Validate one config file as `check` and `show` do: files under `configs/runs/` or outside
    any `configs/` folder as run files, others with their folder's registered schema."""
    path = Path(path)
    if kind_of(path) in (None, RUNS_FOLDER):
        return load_run_config(path, overrides)
    return load_config(path, overrides)
