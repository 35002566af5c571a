"""`enlace-data corpus CONFIG`: build (or resume) a corpus of token shards from a YAML config;
`enlace-data tokenizer PATH [--text TEXT] [--save DIR]`: show a tokenizer (and how it splits a
text), or write its files (what checkpoints and exports carry) into DIR."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "corpus",
        help="build token shards from raw text (clean, dedup, split, tokenizer, encode)",
        description="Build a corpus from a YAML config (schema: enlace_config.schema.corpus.\n"
        "CorpusConfig). Rerunning resumes an interrupted build; a finished one is left as is.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  enlace-data corpus configs/corpus/es-pd.yaml --limit 500MB",
    )
    p.add_argument("config", metavar="CONFIG", help="corpus config file (YAML)")
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="override config keys (dedup.threshold=0.9)",
    )
    p.add_argument(
        "--limit",
        metavar="SIZE",
        help="read at most SIZE from each source, in file order: bytes of text (5GB, 500MB, "
        "20000000) or documents (100000docs); sets the sources' max_bytes / max_docs (a smaller "
        "value in the config stays)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=run)

    t = subparsers.add_parser(
        "tokenizer",
        help="show a tokenizer: id, vocabulary, special ids; --text shows how it splits a text",
        description="PATH: a corpus out_dir, a run or checkpoint directory, an exported folder\n"
        "or a tokenizer.model file.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  enlace-data tokenizer runs/smoke-cpu --text 'Hola, mundo'",
    )
    t.add_argument(
        "path",
        metavar="PATH",
        help="corpus, run or checkpoint directory, export, or tokenizer.model",
    )
    t.add_argument("--text", metavar="TEXT", help="encode this text and show its pieces")
    t.add_argument(
        "--save",
        metavar="DIR",
        help="write the tokenizer files into DIR (for `enlace-model export --tokenizer DIR`)",
    )
    t.set_defaults(func=run_tokenizer)


def run(args: argparse.Namespace) -> int:
    from enlace_data.corpus.config import load_corpus_config
    from enlace_data.corpus.pipeline import build_corpus
    from enlace_data.corpus.report import format_report

    cfg = load_corpus_config(args.config, args.overrides)
    if args.limit:
        cfg = with_limit(cfg, args.limit)
    manifest = build_corpus(
        cfg, config_file=args.config, progress=False if args.no_progress else None
    )
    report = Path(cfg.out_dir) / "report.json"
    if report.is_file():
        print(format_report(json.loads(report.read_text())))
    splits = manifest["splits"]
    print(
        f"corpus {cfg.name}: {splits['train']['tokens']} train and {splits['val']['tokens']} val "
        f"tokens in {len(splits['train']['shards']) + len(splits['val']['shards'])} shards under "
        f"{cfg.out_dir} (tokenizer {manifest['tokenizer_id']})"
    )
    return 0


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


def with_limit(cfg: Any, limit: str) -> Any:
    """`cfg` (a CorpusConfig) with every source limited to `limit` bytes or documents."""
    import re

    from enlace_data.errors import DataError

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", limit)
    unit = m.group(2).lower() if m else ""
    if m is None or (unit not in _UNITS and unit not in ("doc", "docs")):
        raise DataError(
            f"--limit {limit!r}: expected bytes (5GB, 500MB, 20000000) or documents (100000docs)"
        )
    n = float(m.group(1))
    key = "max_docs" if unit.startswith("doc") else "max_bytes"
    value = max(1, int(n * _UNITS.get(unit, 1)))
    sources = []
    for s in cfg.sources:
        current = getattr(s, key)
        sources.append(
            s.model_copy(update={key: value if current is None else min(current, value)})
        )
    return cfg.model_copy(update={"sources": sources})


def run_tokenizer(args: argparse.Namespace) -> int:
    from enlace_data.tokenizer import Tokenizer, load_tokenizer

    tok = load_tokenizer(args.path)
    print(f"{type(tok).__name__} {tok.tokenizer_id}: vocabulary {tok.vocab_size}")
    if tok.special_ids:
        print("special ids: " + ", ".join(f"{n} {i}" for n, i in tok.special_ids.items()))
    if args.text is not None:
        ids = tok.encode(args.text)
        n = len(args.text.encode("utf-8"))
        print(f"{len(ids)} tokens for {n} bytes ({n / max(1, len(ids)):.2f} bytes/token)")
        if isinstance(tok, Tokenizer):
            print(" ".join(f"{tok.id_to_piece(i)!r}:{i}" for i in ids))
        else:
            print(" ".join(str(i) for i in ids))
        print("round trip: " + ("ok" if tok.decode(ids) == args.text else "CHANGED"))
    if args.save is not None:
        tok.save(args.save)
        print(f"tokenizer files written to {args.save}")
    return 0
