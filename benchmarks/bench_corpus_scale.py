"""Stage 2 scale: does the corpus pipeline hold as the corpus grows? (run by hand, on a quiet machine)

Generates a web-like Spanish corpus as parquet files (the format of FineWeb-2 and the Wikipedia
dumps on the Hub) from the es-pd books: each document is 2-6 paragraphs drawn at random, a unique
first line (date and author, so that documents are distinct), and web noise in realistic shares:
exact copies of earlier documents (8%, some re-cased), near copies with two words changed (5%),
cookie-banner and menu lines (30% of documents carry one), keyword spam (2%), markup junk (1%) and
English pages (3%). Then it runs the whole pipeline (`enlace-data corpus`: read -> clean and filter
-> dedup -> split -> tokenizer sample and training -> encode -> shards) in a fresh process per size,
the smaller sizes taking the first bytes of the same files through the source's `max_bytes`, and
reports MB/s per stage, CPU seconds and peak RSS of the main process and of the worker processes.

    uv run python benchmarks/bench_corpus_scale.py --sizes 0.5,2          # the issue's measurement
    uv run python benchmarks/bench_corpus_scale.py --sizes 0.02,0.08      # a quick check it works

Needs ENLACE_SHARED_DATA (the es-pd books) and the `web` extra (pyarrow). The generated files and
builds go under --workdir (default: a temporary folder, removed at the end unless --keep); the
generated corpus is reused when it is already there and large enough. Stage rates: read, clean and
dedup are MB per CPU-second (read and dedup run in the main process, serially; clean in the worker
processes, summed: its per-core rate), so other load on the machine does not distort them; prepare,
tokenizer, encode and the whole build are wall-clock rates over the input text.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = """
import json, resource, sys, time
from enlace_data.corpus import build_corpus, load_corpus_config
t = time.perf_counter()
m = build_corpus(load_corpus_config(sys.argv[1]), progress=False, log=lambda *a: None)
print(json.dumps({
    "wall_s": time.perf_counter() - t,
    "self_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "workers_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    "cpu_s": sum(getattr(resource.getrusage(w), f) for w in (resource.RUSAGE_SELF,
                 resource.RUSAGE_CHILDREN) for f in ("ru_utime", "ru_stime")),
}))
"""

BOILERPLATE = [
    "Utilizamos cookies propias y de terceros para mejorar tu experiencia. Aceptar cookies",
    "Inicio | Noticias | Deportes | Cultura | Contacto",
    "Compartir en Facebook Compartir en Twitter Enviar por WhatsApp",
    "© 2024 Todos los derechos reservados.",
    "Suscríbete a nuestro boletín",
]
ENGLISH = [
    "The committee met on Tuesday to discuss the new budget proposal for the coming year.",
    "It includes funding for schools, roads and the public library in the old town.",
    "Several members of the community spoke in favour of the plan at the meeting.",
    "Others asked for more time to review the numbers before the final vote.",
    "The mayor said that the city would publish every document on its website.",
    "Local shops expect more visitors once the new bridge opens next spring.",
    "A spokesman for the council declined to comment on the delays.",
    "Residents can send their questions by email until the end of the month.",
]
SPAM = "comprar zapatos baratos online envío gratis oferta "
JUNK = "{{<div class='x'>}} |~| ^^ <<>> ☆☆☆ ▓▓▓ ♥♥ #$%& "


def book_paragraphs(shared: Path) -> list[str]:
    from enlace_data.gutenberg import clean_book

    out: list[str] = []
    for path in sorted((shared / "es-pd").glob("*.txt")):
        text = clean_book(path.read_bytes())
        out += [" ".join(p.split()) for p in text.split("\n\n") if len(p) > 200]
    return out


def documents(paragraphs: list[str], rng: random.Random):  # -> Iterator[str]
    recent: list[str] = []
    k = 0
    while True:
        k += 1
        u = rng.random()
        if recent and u < 0.08:  # exact copy, sometimes re-cased
            doc = rng.choice(recent)
            yield doc.upper() if rng.random() < 0.2 else doc
            continue
        if recent and u < 0.13:  # near copy: two words changed
            words = rng.choice(recent).split(" ")
            for _ in range(2):
                words[rng.randrange(len(words))] = rng.choice(("casa", "río", "luz"))
            yield " ".join(words)
            continue
        head = f"Publicado el {1 + k % 28} de marzo de {2000 + k % 25} por lector{k}."
        body = "\n\n".join(rng.choice(paragraphs) for _ in range(rng.randint(2, 6)))
        if u < 0.15:
            body = " ".join(rng.sample(ENGLISH, len(ENGLISH)))
        elif u < 0.17:
            body = SPAM * 40 + body
        elif u < 0.18:
            body = body + "\n" + JUNK * 30
        doc = f"{head}\n{body}"
        if rng.random() < 0.3:
            doc = f"{rng.choice(BOILERPLATE)}\n{doc}\n{rng.choice(BOILERPLATE)}"
        if len(recent) < 2000:
            recent.append(doc)
        else:
            recent[rng.randrange(2000)] = doc
        yield doc


def generate(out: Path, gb: float, shared: Path) -> float:
    """Parquet files of about 128 MB of text each under `out`, `gb` GB in all; returns GB."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    done = out / "DONE.json"
    if done.is_file() and json.loads(done.read_text())["gb"] >= gb:
        return json.loads(done.read_text())["gb"]
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    docs = documents(book_paragraphs(shared), random.Random(0))
    total = 0
    t0 = time.perf_counter()
    for i in range(10_000):
        if total >= gb * 1e9:
            break
        with pq.ParquetWriter(out / f"{i:05d}.parquet", pa.schema([("text", pa.string())])) as w:
            size = 0
            while size < 128e6 and total + size < gb * 1e9:
                batch = [next(docs) for _ in range(2000)]
                size += sum(len(d.encode()) for d in batch)
                w.write_table(pa.table({"text": batch}))
        total += size
        print(f"  generated {total / 1e9:.2f} GB ({time.perf_counter() - t0:.0f} s)", flush=True)
    done.write_text(json.dumps({"gb": total / 1e9}))
    return total / 1e9


def config(src: Path, out: Path, gb: float, workers: int, language_id: bool) -> dict:
    cleaning: dict = {
        "min_chars": 200,
        "max_symbol_ratio": 0.1,
        "max_duplicate_ngram_fraction": 0.2,
        "boilerplate_lines": ["cookies", "todos los derechos reservados", "compartir en"],
    }
    if language_id:
        cleaning["language_id"] = {"languages": ["es", "en", "pt", "fr", "it", "ca"]}
    return {
        "name": "scale",
        "out_dir": str(out),
        "sources": [
            {"name": "web", "path": str(src), "max_bytes": int(gb * 1e9)},
        ],
        "cleaning": cleaning,
        "split": {"val_fraction": 0.005},
        "tokenizer": {"vocab_size": 8192, "sample_chars": 20_000_000, "num_threads": workers},
        "encoding": {"shard_tokens": 50_000_000, "workers": workers},
    }


def run_size(src: Path, work: Path, gb: float, workers: int, language_id: bool) -> dict:
    out = work / f"build-{gb:g}"
    shutil.rmtree(out, ignore_errors=True)
    cfg_file = work / f"scale-{gb:g}.json"
    cfg_file.write_text(json.dumps(config(src, out, gb, workers, language_id)))
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(cfg_file)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"build of {gb} GB failed:\n{proc.stderr[-3000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    report = json.loads((out / "report.json").read_text())
    res["report"] = report
    res["shards_gb"] = sum(p.stat().st_size for p in out.glob("*.shard")) / 1e9
    shutil.rmtree(out / "work", ignore_errors=True)
    return res


def summarise(gb: float, res: dict) -> list[str]:
    r = res["report"]
    src = r["sources"]["web"]
    read_mb = src["read"]["bytes"] / 1e6
    deduped_mb = src["deduped"]["bytes"] / 1e6
    train_mb = (src["train"]["bytes"] + src["val"]["bytes"]) / 1e6
    p, s = r["prepare_seconds"], r["seconds"]
    rate = lambda mb, sec: f"{mb / sec:.1f}" if sec else "-"  # noqa: E731
    drops = {k: v["docs"] for k, v in src["dropped"].items() if v["docs"]}
    tokens = src["train"]["tokens"] + src["val"]["tokens"]
    return [
        f"{gb:g} GB: read {read_mb:.0f} MB, {src['read']['docs']} docs -> kept {deduped_mb:.0f} MB; "
        f"dropped {drops}; boilerplate lines {src['boilerplate_lines']}; {tokens} tokens, "
        f"shards {res['shards_gb']:.2f} GB",
        f"  MB per CPU-s: read {rate(read_mb, p['read'])} (main), clean "
        f"{rate(read_mb, p['clean'])} (per worker core), dedup {rate(read_mb, p['dedup'])} (main);"
        f"\n  MB/s wall: prepare "
        f"{rate(read_mb, s['prepare'])}, tokenizer {rate(train_mb, s['tokenizer'])}, "
        f"encode {rate(train_mb, s['encode'])}; whole build {rate(read_mb, res['wall_s'])} "
        f"({res['wall_s']:.0f} s wall, {res['cpu_s']:.0f} s CPU)",
        f"  peak RSS: main {res['self_mb']:.0f} MB, largest worker {res['workers_mb']:.0f} MB",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="0.5,2", help="GB of generated text per build (ascending)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--language-id", action="store_true", help="add lingua's filter (slow)")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--keep", action="store_true", help="keep --workdir's files")
    args = ap.parse_args()
    shared = os.environ.get("ENLACE_SHARED_DATA")
    if not shared:
        raise SystemExit("set ENLACE_SHARED_DATA (the es-pd books)")
    sizes = sorted(float(x) for x in args.sizes.split(","))
    work = args.workdir or Path(tempfile.mkdtemp(prefix="enlace-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"load average {os.getloadavg()}, {os.cpu_count()} CPUs, workdir {work}")
    try:
        src = work / "web"
        got = generate(src, sizes[-1], Path(shared))
        print(f"corpus: {got:.2f} GB of parquet text under {src}")
        lines: list[str] = []
        for gb in sizes:
            res = run_size(src, work, gb, args.workers, args.language_id)
            lines += summarise(gb, res)
            print("\n".join(lines[-3:]), flush=True)
        print(f"load average {os.getloadavg()}")
    finally:
        if not args.keep and args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
