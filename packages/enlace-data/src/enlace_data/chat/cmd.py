"""`enlace-data chat SOURCE OUT_DIR`: write a chat data directory (train.jsonl, val.jsonl).

SOURCE is a local .jsonl/.parquet file or a directory of them, a Hugging Face Hub dataset id
(`owner/name`, downloaded with huggingface_hub), or `builtin` (the Spanish set built into
enlace-data). Records hold OpenAI `messages` or ShareGPT `conversations` ({from, value}), mapped to
them. Invalid records are skipped and counted (`--strict` stops at the first). The val split is a
hash-chosen share of the records, so a rerun gives the same split.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import Any

from enlace_data._fs import write_atomic
from enlace_data.errors import DataError

SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                  "system": "system", "tool": "tool"}  # fmt: skip


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "chat",
        help="write a chat data directory from local files, a Hub dataset or the built-in set",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  enlace-data chat builtin data/chat --tools tools.json",
    )
    p.add_argument(
        "source",
        metavar="SOURCE",
        help="FILE.jsonl | FILE.parquet | DIR | owner/name (Hub) | builtin",
    )
    p.add_argument("out_dir", metavar="OUT_DIR", help="where train.jsonl and val.jsonl are written")
    p.add_argument("--val-fraction", type=float, default=0.02, help="share of records for val")
    p.add_argument("--builtin-size", type=int, default=4000, help="builtin: train conversations")
    p.add_argument(
        "--tools",
        type=Path,
        metavar="FILE",
        help="builtin: the tool specs to offer (JSON list, e.g. `enlace-assistant --tools-json`), "
        "so the model trains on the specs its assistant sends; default: a short search spec",
    )
    p.add_argument("--strict", action="store_true", help="stop at the first invalid record")
    p.set_defaults(func=run)


def _files(source: str) -> list[Path]:
    path = Path(source)
    if path.is_file():
        return [path]
    if path.is_dir():
        found = sorted(p for p in path.rglob("*") if p.suffix in (".jsonl", ".parquet"))
        if not found:
            raise DataError("no .jsonl or .parquet files in this directory", path=path)
        return found
    if source.count("/") == 1 and not source.startswith((".", "/")):
        try:
            from huggingface_hub import snapshot_download  # type: ignore[import-not-found]
        except ImportError as e:
            raise DataError(
                f"{source!r} is not a local file or directory, and downloading it from the Hub "
                "needs huggingface_hub (`uv pip install huggingface_hub`)"
            ) from e
        local = snapshot_download(
            source, repo_type="dataset", allow_patterns=["*.jsonl", "*.parquet"]
        )
        return _files(local)
    raise DataError(f"{source!r}: no such file or directory (nor a Hub id owner/name)")


def _as_messages(record: Any) -> Any:
    """OpenAI `messages` as they are; ShareGPT `conversations` mapped to them."""
    turns = record.get("conversations") if isinstance(record, dict) else None
    if not isinstance(turns, list) or "messages" in record:
        return record
    messages = []
    for role, value in ((str(t.get("from")), t.get("value")) for t in turns if isinstance(t, dict)):
        messages.append({"role": SHAREGPT_ROLES.get(role, role), "content": value})
    return {"messages": messages}


def _read_tools(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise DataError(f"cannot read ({e.strerror})", path=path) from e
    except ValueError as e:
        raise DataError(f"not JSON ({e})", path=path) from e


def run(args: argparse.Namespace) -> int:
    from enlace_data.chat.format import normalize_conversation
    from enlace_data.chat.loader import iter_records

    if args.tools and args.source != "builtin":
        raise DataError("--tools goes with the built-in set (SOURCE builtin)")
    if not 0 < args.val_fraction < 1:
        raise DataError(f"--val-fraction must be between 0 and 1, got {args.val_fraction}")
    out = Path(args.out_dir)
    splits: dict[str, list[dict[str, Any]]] = {"train": [], "val": []}
    skipped, reasons = 0, []
    if args.source == "builtin":
        from enlace_data.chat.builtin import builtin_conversations, check_tools

        tools = check_tools(_read_tools(args.tools), str(args.tools)) if args.tools else None
        splits["train"] = builtin_conversations("train", args.builtin_size, tools=tools)
        splits["val"] = builtin_conversations("val", max(1, args.builtin_size // 10), tools=tools)
    else:
        for record, where in (r for f in _files(args.source) for r in iter_records(f)):
            try:
                if isinstance(record, DataError):
                    raise record
                conv = normalize_conversation(_as_messages(record), where)
            except DataError as e:
                if args.strict:
                    raise
                skipped += 1
                if len(reasons) < 5:
                    reasons.append(str(e))
                continue
            line = json.dumps(conv, ensure_ascii=False, sort_keys=True)
            h = int.from_bytes(hashlib.blake2b(line.encode(), digest_size=8).digest(), "little")
            splits["val" if h / 2**64 < args.val_fraction else "train"].append(conv)
    if not splits["train"] or not splits["val"]:
        raise DataError(
            f"too few valid conversations for a train and a val split ({len(splits['train'])} "
            f"train, {len(splits['val'])} val, {skipped} skipped): {'; '.join(reasons)}"
        )
    lines = {
        s: "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cs) for s, cs in splits.items()
    }
    write_atomic({out / f"{s}.jsonl": text.encode() for s, text in lines.items()})
    print(
        f"wrote {out}/train.jsonl ({len(splits['train'])} conversations) and val.jsonl "
        f"({len(splits['val'])}); skipped {skipped} invalid"
    )
    for reason in reasons:
        print(f"  skipped: {reason}")
    return 0
