"""`enlace-data inspect`: validate shards and print their headers (a first look at a corpus)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from enlace_data.errors import DataError
from enlace_data.shards import SHARD_SUFFIX, open_shards


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "inspect",
        help="validate shards and print their headers",
        description="Validate shard files (or every shard in a directory) and print each header:\n"
        "token count, vocabulary, tokenizer, bytes per token. Exit code 2 at the first bad shard.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  enlace-data inspect data/es-pd --vocab-size 32768",
    )
    p.add_argument(
        "paths", nargs="+", type=Path, metavar="PATH", help="shard files or directories of shards"
    )
    p.add_argument(
        "--vocab-size",
        type=int,
        default=None,
        metavar="N",
        help="refuse shards with a larger vocabulary",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    files: list[Path] = []
    for p in args.paths:
        if p.is_dir():
            found = sorted(p.glob(f"*{SHARD_SUFFIX}"))
            if not found:
                raise DataError(f"no *{SHARD_SUFFIX} files in this directory", path=p)
            files.extend(found)
        else:
            files.append(p)
    shards = open_shards(files, max_vocab_size=args.vocab_size)
    tokens = text = 0
    for s in shards:
        h = s.header
        tokens += h.token_count
        text += h.text_bytes
        print(
            f"{s.path}: {h.token_count} tokens, vocab {h.vocab_size}, tokenizer {h.tokenizer_id}, "
            f"{h.text_bytes} text bytes ({h.bytes_per_token:.3f} bytes/token)"
        )
    bpt = text / tokens if tokens else 0.0
    print(f"{len(shards)} shards OK: {tokens} tokens, {text} text bytes ({bpt:.3f} bytes/token)")
    return 0
