"""What keys a config schema has: the model at a key path, a key's default, and why a dotted
override names no key (with the nearest name), for composing and for other packages' checks."""

import difflib
from collections.abc import Sequence
from typing import Any, get_args, get_origin

from pydantic import BaseModel, TypeAdapter

from enlace_config.yamlio import dotted


def model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation (`Model`, `Model | None`, `list[Model]`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for arg in get_args(annotation) if (m := model_in(arg)) is not None), None)


def model_at(schema: type[BaseModel], loc: Sequence[str | int]) -> type[BaseModel] | None:
    model: type[BaseModel] | None = schema
    for part in loc:
        if model is None:
            return None
        if isinstance(part, int):
            continue  # a list item: same model as the list's items
        info = model.model_fields.get(part)
        model = model_in(info.annotation) if info is not None else None
    return model


def schema_default(schema: type[BaseModel], key: str) -> Any:
    """The default of the dotted `key` (`train.grad_clip`) in `schema`, as a resolved config's
    `to_dict()` holds it (JSON form). KeyError when the schema has no such key or the key is
    required (it has no default)."""
    *sections, leaf = key.split(".")
    model = model_at(schema, sections)
    info = model.model_fields.get(leaf) if model is not None else None
    if info is None or info.annotation is None or info.is_required():
        raise KeyError(key)
    default = info.get_default(call_default_factory=True)
    return TypeAdapter[Any](info.annotation).dump_python(default, mode="json")


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def unknown_key_message(name: str, choices: Sequence[str]) -> str:
    hint = did_you_mean(name, choices)
    if hint:
        return f"unknown key{hint}"
    return f"unknown key (the keys here are: {', '.join(choices)})"


def check_override_path(schema: type[BaseModel], path: Sequence[str]) -> str | None:
    """Why `path` names no key of `schema` (None when it does)."""
    model: type[BaseModel] | None = schema
    for i, part in enumerate(path):
        if model is None:
            return f"{dotted(path[:i])} is a value, not a section: nothing below it to set"
        names = list(model.model_fields)
        if part not in names:
            where = f" in {dotted(path[:i])}" if i else ""
            hint = did_you_mean(part, names)
            return f"unknown key {part!r}{where}{hint or ' (keys here: ' + ', '.join(names) + ')'}"
        info = model.model_fields[part]
        model = model_in(info.annotation)
        if model is not None and get_origin(info.annotation) is list:
            model = None  # no overrides inside list items: override the whole list
    return None
