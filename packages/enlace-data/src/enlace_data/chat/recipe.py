"""`enlace-data chat RECIPE.yaml OUT_DIR`: a chat data recipe (configs/chat/, schema
enlace_config.schema.chat.ChatRecipeConfig) built into train.jsonl, val.jsonl and manifest.json.

Start-up first, so that a bad recipe or an unreachable Hub fails before anything is read: the recipe
is validated, every source's files are listed (on the Hub, or in the cache with HF_HUB_OFFLINE=1)
and downloaded into the Hugging Face cache, and each file's columns are checked against the
columns the recipe names. Then each source's rows become conversations (invalid ones skipped and
counted), a hash-chosen val_fraction of them goes to val, and its share of train_conversations is
drawn from the rest (repeated when the source is smaller than its share). The built-in set fills
the tool-use share. Everything depends only on the recipe, its seed and the tool specs: the same
inputs give the same bytes. The three files are written at once at the end.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from enlace_config import ConfigError, load_config
from enlace_config.schema.chat import ChatHubSource, ChatRecipeConfig

from enlace_data._fs import write_atomic
from enlace_data.chat.builtin import builtin_conversations
from enlace_data.chat.format import as_messages, is_val, normalize_conversation
from enlace_data.chat.tools import check_tools, read_tools
from enlace_data.errors import DataError

OASST_COLUMNS = ("message_id", "parent_id", "text", "role", "rank")
OASST_ROLES = {"prompter": "user", "assistant": "assistant"}
MAX_SKIPPED_EXAMPLES = 5  # reasons kept in the manifest per source


def load_recipe(path: Path, overrides: Sequence[str] = ()) -> ChatRecipeConfig:
    try:
        return load_config(path, list(overrides), schema=ChatRecipeConfig).config
    except ConfigError as e:
        raise DataError(f"invalid chat recipe: {e}", path=path) from None


def _needed_columns(source: ChatHubSource) -> list[tuple[str, str]]:
    """(recipe key, column) for every column the source reads."""
    if source.format == "oasst":
        needed = [("format", c) for c in OASST_COLUMNS]
    elif source.format == "pair":
        needed = [
            (key, getattr(source, key))
            for key in ("prompt_column", "context_column", "response_column")
            if getattr(source, key) is not None
        ]
    else:
        needed = [("messages_column", source.messages_column)]
    return needed + [("match", column) for column in source.match]


def _fetch(recipe: ChatRecipeConfig, path: Path) -> list[list[tuple[str, Path]]]:
    """Every source's (name in the repository, local path) files, listed first for all sources
    (an unreachable Hub fails before any download), then downloaded and their columns checked."""
    from enlace_data.corpus.hub import hub_check, hub_download, hub_file_names

    wheres = [f"{path}: sources[{i}] ({s.name})" for i, s in enumerate(recipe.sources)]
    for source, where in zip(recipe.sources, wheres, strict=True):
        hub_check(source, where)
    names = [hub_file_names(s, w) for s, w in zip(recipe.sources, wheres, strict=True)]
    fetched: list[list[tuple[str, Path]]] = []
    for i, (source, where, files) in enumerate(zip(recipe.sources, wheres, names, strict=True)):
        local = [(name, hub_download(source, name, where)) for name in files]
        for name, file in local:
            columns = _columns(file)
            for key, column in _needed_columns(source):
                if column not in columns:
                    raise DataError(
                        f"{path}: sources[{i}].{key}: column {column!r} is not in {name} of "
                        f"dataset {source.dataset} (its columns: {', '.join(columns)}); name one "
                        "of its columns, as the dataset card lists them"
                    )
        fetched.append(local)
    return fetched


def _columns(file: Path) -> list[str]:
    import pyarrow.parquet as pq

    try:
        return list(pq.read_schema(file).names)
    except Exception as e:  # pyarrow raises ArrowInvalid, OSError...
        raise DataError(f"not a readable parquet file ({e})", path=file) from e


def _rows(files: list[tuple[str, Path]], source: ChatHubSource) -> Iterator[tuple[Any, str]]:
    """The rows that pass the source's `match`, each with where it stands."""
    import pyarrow.parquet as pq

    for name, file in files:
        for i, row in enumerate(pq.read_table(file).to_pylist()):
            if all(row.get(k) == v for k, v in source.match.items()):
                yield row, f"{source.dataset}/{name}: row {i + 1}"


def _records(files: list[tuple[str, Path]], source: ChatHubSource) -> Iterator[tuple[Any, str]]:
    """The source's records as `messages` conversations (not yet validated)."""

    if source.format == "oasst":
        yield from _oasst_threads(_rows(files, source))
        return
    for row, where in _rows(files, source):
        if source.format == "messages":
            turns = row.get(source.messages_column)
            sharegpt = isinstance(turns, list) and any(
                isinstance(t, dict) and "from" in t for t in turns
            )
            record = {"conversations": turns} if sharegpt else {"messages": turns}
            if row.get("tools") is not None:
                record["tools"] = row["tools"]
            yield as_messages(record), where
            continue
        assert source.prompt_column and source.response_column
        prompt = row.get(source.prompt_column)
        context = row.get(source.context_column) if source.context_column else None
        if isinstance(prompt, str) and isinstance(context, str) and context.strip():
            prompt = f"{prompt}\n\n{context}"
        messages = [
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": row.get(source.response_column)},
        ]
        yield {"messages": messages}, where


def _oasst_threads(rows: Iterator[tuple[Any, str]]) -> Iterator[tuple[Any, str]]:
    """One conversation per prompt of OpenAssistant's message trees: from the prompt, the
    best-ranked reply at each turn (rank 0 first; unranked last; then the message id)."""
    children: dict[Any, list[dict[str, Any]]] = {}
    roots: list[tuple[dict[str, Any], str]] = []
    for row, where in rows:
        if row.get("parent_id") is None:
            roots.append((row, where))
        else:
            children.setdefault(row["parent_id"], []).append(row)

    def best(msgs: list[dict[str, Any]]) -> dict[str, Any]:
        return min(msgs, key=lambda m: (m.get("rank") is None, m.get("rank") or 0, m["message_id"]))

    for root, where in roots:
        messages, node = [], root
        while True:
            role = str(node.get("role"))
            messages.append({"role": OASST_ROLES.get(role, role), "content": node.get("text")})
            replies = children.get(node["message_id"])
            if not replies:
                break
            node = best(replies)
        yield {"messages": messages}, where


def _commit(file: Path) -> str | None:
    """The commit a file of the Hugging Face cache was downloaded at (its snapshots/<commit>/
    folder), so the manifest names the exact revision read."""
    parts = file.parts
    return parts[parts.index("snapshots") + 1] if "snapshots" in parts[:-1] else None


def _draw(pool: list[dict[str, Any]], n: int, rng: random.Random) -> list[dict[str, Any]]:
    """n conversations of the pool: a shuffled pass, again as often as n needs."""
    out: list[dict[str, Any]] = []
    while len(out) < n and pool:
        order = pool[:]
        rng.shuffle(order)
        out.extend(order[: n - len(out)])
    return out


def build_recipe(
    path: Path, out: Path, overrides: Sequence[str] = (), tools_file: Path | None = None
) -> dict[str, Any]:
    """Build the recipe at `path` into `out`; returns the manifest it writes."""
    recipe = load_recipe(path, overrides)
    tools = check_tools(read_tools(tools_file), str(tools_file)) if tools_file else None
    fetched = _fetch(recipe, path)
    train: list[dict[str, Any]] = []
    val: list[dict[str, Any]] = []
    sources: list[dict[str, Any]] = []
    for source, files in zip(recipe.sources, fetched, strict=True):
        pool: list[dict[str, Any]] = []
        skipped, reasons, held_out = 0, [], 0
        for record, where in _records(files, source):
            try:
                conv = normalize_conversation(record, where)
            except DataError as e:
                skipped += 1
                if len(reasons) < MAX_SKIPPED_EXAMPLES:
                    reasons.append(str(e))
                continue
            if is_val(conv, recipe.val_fraction):
                val.append(conv)
                held_out += 1
            else:
                pool.append(conv)
        if not pool:
            raise DataError(
                f"{path}: source {source.name} ({source.dataset}): no valid train conversation "
                f"({skipped} skipped: {'; '.join(reasons) or 'no row matched'}); check its "
                "match, columns and split"
            )
        want = round(source.share * recipe.train_conversations)
        rng = random.Random(f"enlace-chat-recipe:{recipe.seed}:{source.name}")
        train.extend(_draw(pool, want, rng))
        sources.append(
            {
                "name": source.name,
                "dataset": source.dataset,
                "subset": source.subset,
                "split": source.split,
                "revision": source.revision,
                "commit": _commit(files[0][1]),
                "files": [name for name, _ in files],
                "license": source.license,
                "share": source.share,
                "conversations": len(pool) + held_out,
                "skipped": skipped,
                "skipped_examples": reasons,
                "val": held_out,
                "train": want,
                "repeats": round(want / len(pool), 3),
            }
        )
    n_tools = round(recipe.tool_use.share * recipe.train_conversations)
    builtin = {
        split: [
            normalize_conversation(c, f"built-in set ({split})")
            for c in builtin_conversations(split, n, seed=recipe.seed, tools=tools)
        ]
        for split, n in (("train", n_tools), ("val", recipe.tool_use.val_conversations))
    }
    train.extend(builtin["train"])
    val.extend(builtin["val"])
    random.Random(f"enlace-chat-recipe:{recipe.seed}:order").shuffle(train)
    manifest = {
        "recipe": recipe.name,
        "recipe_file": str(path),
        "config": recipe.model_dump(mode="json"),
        "seed": recipe.seed,
        "train_conversations": len(train),
        "val_conversations": len(val),
        "sources": sources,
        "tool_use": {
            "share": recipe.tool_use.share,
            "train": n_tools,
            "val": len(builtin["val"]),
            "tools": str(tools_file) if tools_file else "built-in search spec",
            "with_tool_calls": sum(
                any(m.get("tool_calls") for m in c["messages"]) for c in builtin["train"]
            ),
        },
    }
    texts = {
        "train.jsonl": "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in train),
        "val.jsonl": "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in val),
        "manifest.json": json.dumps(manifest, ensure_ascii=False, indent=2) + "\n",
    }
    write_atomic({out / name: text.encode() for name, text in texts.items()})
    return manifest
