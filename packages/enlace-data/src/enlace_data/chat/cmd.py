"""`enlace-data chat SOURCE OUT_DIR`: write a chat data directory (train.jsonl, val.jsonl).

SOURCE is a local .jsonl/.parquet file or a directory of them, a Hugging Face Hub dataset id
(`owner/name`, downloaded with huggingface_hub), `builtin` (the Spanish set built into
enlace-data), or a recipe RECIPE.yaml (configs/chat/: Hub sets mixed by shares with the built-in
tool-use share; KEY=VALUE overrides its keys; it writes manifest.json too, see chat/recipe.py). Records hold OpenAI `messages` or ShareGPT `conversations` ({from, value}), mapped to
them. Invalid records are skipped and counted (`--strict` stops at the first). The val split is a
hash-chosen share of the records, so a rerun gives the same split.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from enlace_data._fs import write_atomic
from enlace_data.chat.format import as_messages, is_val
from enlace_data.chat.tools import read_tools
from enlace_data.errors import DataError


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "chat",
        help="write a chat data directory from local files, a Hub dataset or the built-in set",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  enlace-data chat builtin data/chat --tools tools.json\n"
        "  enlace-data chat configs/chat/sft-es.yaml data/chat --tools tools.json",
    )
    p.add_argument(
        "source",
        metavar="SOURCE",
        help="FILE.jsonl | FILE.parquet | DIR | owner/name (Hub) | builtin | RECIPE.yaml",
    )
    p.add_argument("out_dir", metavar="OUT_DIR", help="where train.jsonl and val.jsonl are written")
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="RECIPE.yaml: override recipe keys (train_conversations=60000)",
    )
    p.add_argument(
        "--val-fraction", type=float, help="share of records for val (default 0.02; a recipe's own)"
    )
    p.add_argument("--builtin-size", type=int, help="builtin: train conversations (default 4000)")
    p.add_argument(
        "--tools",
        type=Path,
        metavar="FILE",
        help="builtin or RECIPE.yaml: the tool specs to offer (JSON list, e.g. `enlace-assistant --tools-json`), "
        "so the model trains on the specs its assistant sends; default: a short search spec",
    )
    p.add_argument(
        "--household-requests",
        action="store_true",
        help="builtin: only requests to the household's tools (remember, forget, the shopping "
        "list), each with no system prompt and no specs before it: the reading warm-up before the "
        "SFT (scripts/chat-cpu.sh); needs --tools offering them",
    )
    p.add_argument(
        "--searches",
        type=float,
        default=0.0,
        metavar="SHARE",
        help="--household-requests: the chance that a draw is a short search instead (the question, "
        "the call, the result, the answer; scripts/chat-cpu.sh: 0.3, about 35 %% of the set)",
    )
    p.add_argument(
        "--plain",
        type=float,
        default=0.0,
        metavar="SHARE",
        help="--household-requests: the chance that a draw is a question answered without a tool "
        "instead (a greeting, general knowledge, a sum; scripts/chat-cpu.sh: 0.2), drawn before "
        "--searches' chance",
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


def run(args: argparse.Namespace) -> int:
    from enlace_data.chat.format import normalize_conversation
    from enlace_data.chat.loader import iter_records

    if args.household_requests and not (args.source == "builtin" and args.tools):
        raise DataError(
            "--household-requests goes with the built-in set and the assistant's tool specs: "
            "enlace-data chat builtin OUT_DIR --tools tools.json --household-requests"
        )
    if args.searches and not args.household_requests:
        raise DataError("--searches goes with --household-requests (the warm-up's set)")
    if args.plain and not args.household_requests:
        raise DataError("--plain goes with --household-requests (the warm-up's set)")
    if args.household_requests:
        from enlace_data.chat.household_requests import check_shares

        check_shares(args.searches, args.plain)  # at start-up, before any conversation is drawn
    if args.source.endswith((".yaml", ".yml")):
        return _run_recipe(args)
    if args.overrides:
        raise DataError(
            f"KEY=VALUE overrides go with a recipe (SOURCE RECIPE.yaml): {args.overrides}"
        )
    args.val_fraction = 0.02 if args.val_fraction is None else args.val_fraction
    args.builtin_size = 4000 if args.builtin_size is None else args.builtin_size
    if args.tools and args.source != "builtin":
        raise DataError("--tools goes with the built-in set (SOURCE builtin) or a recipe")
    if not 0 < args.val_fraction < 1:
        raise DataError(f"--val-fraction must be between 0 and 1, got {args.val_fraction}")
    out = Path(args.out_dir)
    splits: dict[str, list[dict[str, Any]]] = {"train": [], "val": []}
    skipped, reasons = 0, []
    if args.source == "builtin":
        from enlace_data.chat.builtin import builtin_conversations
        from enlace_data.chat.household_requests import household_requests
        from enlace_data.chat.tools import check_tools

        tools = check_tools(read_tools(args.tools), str(args.tools)) if args.tools else None
        sizes = {"train": args.builtin_size, "val": max(1, args.builtin_size // 10)}
        for split, n in sizes.items():
            if args.household_requests and tools is not None:
                splits[split] = household_requests(
                    split, n, tools=tools, searches=args.searches, plain=args.plain
                )
            else:
                splits[split] = builtin_conversations(split, n, tools=tools)
    else:
        for record, where in (r for f in _files(args.source) for r in iter_records(f)):
            try:
                if isinstance(record, DataError):
                    raise record
                conv = normalize_conversation(as_messages(record), where)
            except DataError as e:
                if args.strict:
                    raise
                skipped += 1
                if len(reasons) < 5:
                    reasons.append(str(e))
                continue
            splits["val" if is_val(conv, args.val_fraction) else "train"].append(conv)
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


def _run_recipe(args: argparse.Namespace) -> int:
    from enlace_data.chat.recipe import build_recipe

    recipe = Path(args.source)
    if not recipe.is_file():
        raise DataError("no such recipe file (configs/chat/ holds the recipes)", path=recipe)
    if args.val_fraction is not None or args.builtin_size is not None:
        raise DataError(
            "--val-fraction and --builtin-size are the recipe's val_fraction and "
            "train_conversations x tool_use.share: set them in the recipe or as KEY=VALUE"
        )
    out = Path(args.out_dir)
    m = build_recipe(recipe, out, args.overrides, args.tools)
    print(
        f"wrote {out}/train.jsonl ({m['train_conversations']} conversations), val.jsonl "
        f"({m['val_conversations']}) and manifest.json from recipe {m['recipe']}"
    )
    for s in m["sources"]:
        print(
            f"  {s['name']} ({s['dataset']}, {s['license']}): {s['train']} train, {s['val']} val "
            f"of {s['conversations']} conversations (x{s['repeats']}), {s['skipped']} skipped"
        )
    t = m["tool_use"]
    print(f"  tool use (built-in set, {t['tools']}): {t['train']} train, {t['val']} val")
    return 0
