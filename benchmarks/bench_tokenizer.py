"""Tokenizer efficiency on held-out Spanish: a 32k SentencePiece vocabulary trained on the books of
$ENLACE_SHARED_DATA/es-pd leaving one book out at a time (Gutenberg boilerplate removed, wrapped
lines joined, exactly as the corpus pipeline reads them), measured on the left-out book.

    uv run python benchmarks/bench_tokenizer.py                 # all 14 books, vocab 32768
    uv run python benchmarks/bench_tokenizer.py --books 4 --vocab 16384 --json out.json

Prints per book: bytes/token and tokens/word of the tokenizer, and tokens/word at byte level
(= bytes/word, the smoke runs' ByteTokenizer); then min / median / max over the books.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from enlace_config.schema.corpus import CleaningConfig, CorpusSource
from enlace_data.corpus.cleaning import clean_text
from enlace_data.corpus.sources import SourceReader
from enlace_data.tokenizer import train_tokenizer


def read_book(path: Path) -> list[str]:
    reader = SourceReader(CorpusSource(name=path.stem, path=str(path)), 0, CleaningConfig())
    return [t for t in (clean_text(d.text) for d in reader) if t]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", default=os.environ.get("ENLACE_SHARED_DATA", "../shared/data"))
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--model-type", default="bpe", choices=["bpe", "unigram"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--books", type=int, default=0, help="leave out only the first N books (0: all)"
    )
    ap.add_argument("--sample-chars", type=int, default=0, help="cap training text (0: all)")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()

    folder = Path(args.data) / "es-pd"
    paths = sorted(folder.glob("*.txt"))
    if not paths:
        raise SystemExit(f"no books in {folder}; set ENLACE_SHARED_DATA or --data")
    books = {p.stem: read_book(p) for p in paths}
    print(
        f"{len(books)} books, {sum(len(''.join(d)) for d in books.values()) / 1e6:.1f} M chars; "
        f"vocab {args.vocab} {args.model_type}, {args.threads} threads, load {os.getloadavg()[0]:.1f}"
    )
    rows = []
    held = list(books)[: args.books or None]
    for name in held:
        lines: list[str] = []
        chars = 0
        for other, docs in books.items():
            if other == name:
                continue
            for d in docs:
                if args.sample_chars and chars >= args.sample_chars:
                    break
                lines.extend(d.split("\n"))
                chars += len(d)
        t0 = time.perf_counter()
        tok = train_tokenizer(
            lines, vocab_size=args.vocab, model_type=args.model_type, num_threads=args.threads
        )
        train_s = time.perf_counter() - t0
        docs = books[name]
        nbytes = sum(len(d.encode()) for d in docs)
        ntok = sum(len(ids) for ids in tok.encode_batch(docs))
        nwords = sum(len(d.split()) for d in docs)
        row = {
            "book": name,
            "bytes": nbytes,
            "bytes_per_token": nbytes / ntok,
            "tokens_per_word": ntok / nwords,
            "byte_level_tokens_per_word": nbytes / nwords,
            "train_chars": chars,
            "train_seconds": train_s,
        }
        rows.append(row)
        print(
            f"{name:48s} {row['bytes_per_token']:.3f} B/tok  {row['tokens_per_word']:.3f} tok/word"
            f"  (bytes: {row['byte_level_tokens_per_word']:.2f} tok/word)  trained in {train_s:.1f} s",
            flush=True,
        )
    summary = {}
    for key in ("bytes_per_token", "tokens_per_word", "byte_level_tokens_per_word"):
        vals = [r[key] for r in rows]
        summary[key] = {"min": min(vals), "median": statistics.median(vals), "max": max(vals)}
        print(
            f"{key:28s} min {min(vals):.3f}  median {statistics.median(vals):.3f}  max {max(vals):.3f}"
        )
    ratio = summary["byte_level_tokens_per_word"]["median"] / summary["tokens_per_word"]["median"]
    print(f"median tokens/word: {ratio:.2f}x fewer than byte level")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"args": vars(args), "rows": rows, "summary": summary}, indent=2)
        )


if __name__ == "__main__":
    main()
