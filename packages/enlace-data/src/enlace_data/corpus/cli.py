"""`enlace-data corpus CONFIG`: build (or resume) a corpus of token shards from a YAML config."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "corpus",
        help="build token shards from raw text (clean, dedup, split, tokenizer, encode)",
        description="Build a corpus from a YAML config (schema: enlace_config.schema.corpus."
        "CorpusConfig; example: configs/corpus/es-pd.yaml). Rerunning resumes an interrupted "
        "build; a finished one is left as is.",
    )
    p.add_argument("config", help="corpus config file (YAML)")
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="override config keys (dedup.threshold=0.9)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from enlace_data.corpus.config import load_corpus_config
    from enlace_data.corpus.pipeline import build_corpus
    from enlace_data.corpus.report import format_report

    cfg = load_corpus_config(args.config, args.overrides)
    manifest = build_corpus(
        cfg, config_file=args.config, progress=False if args.no_progress else None
    )
    from pathlib import Path

    report = Path(cfg.out_dir) / "report.json"
    if report.is_file():
        import json

        print(format_report(json.loads(report.read_text())))
    splits = manifest["splits"]
    print(
        f"corpus {cfg.name}: {splits['train']['tokens']} train and {splits['val']['tokens']} val "
        f"tokens in {len(splits['train']['shards']) + len(splits['val']['shards'])} shards under "
        f"{cfg.out_dir} (tokenizer {manifest['tokenizer_id']})"
    )
    return 0
