"""Corpus pipeline figures (run by hand; the machine's load is printed, other work skews them).

1. Encoding throughput, MB of text per second, on the cleaned es-pd books: the pipeline's encoder
   (shards written, 1 and 2 worker processes) side by side with a plain single-process
   SentencePiece loop (`sp.encode(doc)` per document, nothing written). Interleaved repeats, medians.
2. Peak RSS and stage times of whole builds (`build_corpus`, as `enlace-data corpus` runs it): the
   es-pd books as they are with 1 and 2 workers; then, with 2 workers, one distinct variant of them
   (each paragraph's words deterministically shuffled, so that deduplication keeps it) and ten
   variants (10x the text). Peak RSS should stay flat. Each build runs in its own process, which
   reports its own peak RSS and its worker processes' peak.

    uv run python benchmarks/bench_corpus.py                 # both
    uv run python benchmarks/bench_corpus.py --only encode   # or --only rss
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sentencepiece as spm
from enlace_config.schema.corpus import CleaningConfig, CorpusSource
from enlace_data.corpus.cleaning import clean_text
from enlace_data.corpus.encode import Encoder, SplitProgress, encode_split
from enlace_data.corpus.sources import SourceReader
from enlace_data.tokenizer import MODEL_FILE, train_tokenizer

CHILD = """
import json, resource, sys
from enlace_data.corpus import build_corpus, load_corpus_config
m = build_corpus(load_corpus_config(sys.argv[1]), progress=False, log=lambda *a: None)
print(json.dumps({
    "self_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "workers_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    "train_tokens": m["splits"]["train"]["tokens"],
    "cpu_s": sum(getattr(resource.getrusage(w), f) for w in (resource.RUSAGE_SELF,
                 resource.RUSAGE_CHILDREN) for f in ("ru_utime", "ru_stime")),
}))
"""


def es_pd_docs(folder: Path) -> list[str]:
    docs: list[str] = []
    for path in sorted(folder.glob("*.txt")):
        reader = SourceReader(CorpusSource(name="b", path=str(path)), 0, CleaningConfig())
        docs.extend(t for t in (clean_text(d.text) for d in reader) if t)
    return docs


def _cpu_seconds() -> float:
    """User + system time of this process and of its finished (joined) children."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def bench_encode(docs: list[str], vocab: int, repeats: int, tmp: Path) -> None:
    lines = [line for d in docs for line in d.split("\n")]
    tok = train_tokenizer(lines, vocab_size=vocab, num_threads=2)
    tok.save(tmp)
    sp = spm.SentencePieceProcessor(model_file=str(tmp / MODEL_FILE))
    docs_file = tmp / "docs.jsonl"
    with open(docs_file, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"s": 0, "t": d, "r": 1}, ensure_ascii=False) + "\n")
    mb = sum(len(d.encode()) for d in docs) / 1e6
    print(f"encoding {mb:.1f} MB of text ({len(docs)} documents), vocab {tok.vocab_size}")

    def plain() -> None:
        for d in docs:
            sp.encode(d)

    def pipeline(workers: int) -> None:
        out = tmp / f"out{workers}"
        out.mkdir(exist_ok=True)
        encoder = Encoder(tok, tmp / MODEL_FILE, workers)  # pool start-up counted
        try:
            encode_split(
                out_dir=out,
                docs_file=docs_file,
                progress=SplitProgress("train"),
                passes=1,
                source_names=["b"],
                tok=tok,
                encoder=encoder,
                shard_tokens=1_000_000,
                batch_chars=1_000_000,
                save_state=lambda p: None,
            )
        finally:
            encoder.close()

    runs = {
        "plain sentencepiece loop": plain,
        "pipeline, 1 worker": lambda: pipeline(1),
        "pipeline, 2 workers": lambda: pipeline(2),
    }
    times: dict[str, list[float]] = {k: [] for k in runs}
    cpu: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            c0 = _cpu_seconds()
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(_cpu_seconds() - c0)
    base = statistics.median(times["plain sentencepiece loop"])
    base_cpu = statistics.median(cpu["plain sentencepiece loop"])
    for name, ts in times.items():
        med, c = statistics.median(ts), statistics.median(cpu[name])
        print(
            f"  {name:26s} {mb / med:6.2f} MB/s wall ({base / med:.2f}x the plain loop; median "
            f"of {repeats}: {med:.2f} s), {mb / c:5.2f} MB per CPU-second "
            f"({base_cpu / c:.2f}x the plain loop's)"
        )
    print(
        "  (CPU-seconds include the worker processes; on a loaded machine wall time says little "
        "about parallel speed-up, MB per CPU-second says how much work each MB costs)"
    )


def write_variants(docs: list[str], n: int, root: Path) -> Path:
    """n distinct copies: variant v shuffles each paragraph's words with seed (v, paragraph)."""
    root.mkdir(parents=True, exist_ok=True)
    for v in range(n):
        with open(root / f"variant{v:02d}.txt", "w", encoding="utf-8") as f:
            for i, d in enumerate(docs):
                for j, para in enumerate(d.split("\n\n")):
                    words = para.split()
                    random.Random(f"{v}/{i}/{j}").shuffle(words)
                    f.write(" ".join(words) + "\n\n")
    return root


def bench_rss(docs: list[str], books: Path, tmp: Path, vocab: int) -> None:
    cases = [
        ("es-pd books, 1 worker", books, 1),
        ("es-pd books, 2 workers", books, 2),
        ("1 distinct variant", write_variants(docs, 1, tmp / "v1"), 2),
        ("10 distinct variants", write_variants(docs, 10, tmp / "v10"), 2),
    ]
    for label, src, workers in cases:
        out = tmp / f"build-{src.name}-{workers}"
        cfg = {
            "name": "bench",
            "out_dir": str(out),
            "sources": [{"name": "s", "path": str(src)}],
            "tokenizer": {"vocab_size": vocab, "sample_chars": 4_000_000},
            "encoding": {"workers": workers, "shard_tokens": 5_000_000},
        }
        cfg_file = tmp / f"{src.name}-{workers}.yaml"
        cfg_file.write_text(json.dumps(cfg))
        in_mb = sum(p.stat().st_size for p in src.glob("*.txt")) / 1e6
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, str(cfg_file)],
            capture_output=True,
            text=True,
            check=False,
        )
        secs = time.perf_counter() - t0
        if proc.returncode:
            raise SystemExit(proc.stderr)
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        report = json.loads((out / "report.json").read_text())
        kept = sum(s["deduped"]["docs"] for s in report["sources"].values())
        dropped = sum(
            sum(v["docs"] for v in s["dropped"].values()) for s in report["sources"].values()
        )
        print(
            f"  {label:26s} {in_mb:6.1f} MB in, {kept} docs kept, {dropped} dropped, "
            f"{r['train_tokens'] / 1e6:.1f} M train tokens, {secs:.0f} s: peak RSS main "
            f"{r['self_mb']:.0f} MB, largest worker {r['workers_mb']:.0f} MB"
        )
        stages = ", ".join(f"{k} {v:.1f}" for k, v in report["seconds"].items())
        print(
            f"  {'':26s} seconds: {stages}; CPU-seconds (main + workers) {r['cpu_s']:.1f}; "
            f"load {os.getloadavg()[0]:.1f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", default=os.environ.get("ENLACE_SHARED_DATA", "../shared/data"))
    ap.add_argument("--only", choices=["encode", "rss"])
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    books = Path(args.data) / "es-pd"
    docs = es_pd_docs(books)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if args.only in (None, "encode"):
            bench_encode(docs, args.vocab, args.repeats, tmp / "enc")
        if args.only in (None, "rss"):
            print("whole builds (tokenizer sample 4 M chars):")
            bench_rss(docs, books, tmp, args.vocab)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
