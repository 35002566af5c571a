"""The build report: documents and bytes in and out at each step, per source, and the tokenizer's
efficiency on the validation split (bytes per token, tokens per word, against byte-level)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from enlace_config.schema.corpus import CorpusConfig

from enlace_data._fs import json_bytes, write_atomic
from enlace_data.corpus.cleaning import FILTERS
from enlace_data.tokenizer import Tokenizer

if TYPE_CHECKING:
    from enlace_data.corpus.encode import SplitProgress

STEPS = ("read", "cleaned", "deduped", "train", "val")
DROPS = (*FILTERS, "exact_duplicate", "near_duplicate")


def build_report(
    cfg: CorpusConfig,
    prepared: dict[str, Any],
    splits: dict[str, SplitProgress],
    tok: Tokenizer,
    timings: dict[str, float],
) -> dict[str, Any]:
    sources: dict[str, Any] = {}
    for name, st in prepared["sources"].items():
        read = st["read"]
        row: dict[str, Any] = {
            "read": {k: read[k] for k in ("docs", "bytes", "files")},
            **{k: read[k] for k in ("bad_utf8_bytes", "bad_utf8_dropped", "gutenberg_files")},
            "null_docs": read.get("null_docs", 0),
            "stopped_at_limit": read.get("stopped_at_limit", False),
            "boilerplate_lines": st.get("boilerplate_lines", 0),
            **{k: st[k] for k in ("cleaned", "dropped", "deduped")},
        }
        for split in ("train", "val"):
            enc = splits[split].sources.get(name, {"documents": 0, "tokens": 0, "text_bytes": 0})
            row[split] = {**st[split], "tokens": enc["tokens"], "written_docs": enc["documents"]}
        sources[name] = row
    # Efficiency on the validation split: text tokens only (the separators carry no text).
    val_docs, val_tokens, val_bytes, val_words = (
        sum(r["val"][k] for r in sources.values()) for k in ("docs", "tokens", "bytes", "words")
    )
    val_tokens -= val_docs
    efficiency = {
        "val_text_bytes": val_bytes,
        "val_tokens": val_tokens,
        "val_words": val_words,
        "bytes_per_token": round(val_bytes / val_tokens, 4) if val_tokens else None,
        "tokens_per_word": round(val_tokens / val_words, 4) if val_words else None,
        "byte_level_tokens_per_word": round(val_bytes / val_words, 4) if val_words else None,
    }
    return {
        "name": cfg.name,
        "tokenizer_id": tok.tokenizer_id,
        "vocab_size": tok.vocab_size,
        "near_dedup": prepared.get("near_dedup"),
        "prepare_seconds": prepared.get("stage_seconds"),
        "sources": sources,
        "tokenizer_efficiency_val": efficiency,
        "seconds": timings,
    }


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f}"


def format_report(report: dict[str, Any]) -> str:
    lines = [
        f"# Corpus build report: {report['name']}",
        "",
        f"Tokenizer {report['tokenizer_id']} (vocabulary {report['vocab_size']}).",
        "",
        f"| source | read docs / MB | cleaned docs / MB | dropped ({', '.join(DROPS)}) "
        "| deduped docs / MB | train docs / MB / tokens | val docs / MB / tokens |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in report["sources"].items():
        d = r["dropped"]
        dropped = ", ".join(str(d.get(k, {"docs": 0})["docs"]) for k in DROPS)
        lines.append(
            f"| {name} | {r['read']['docs']} / {_mb(r['read']['bytes'])} "
            f"| {r['cleaned']['docs']} / {_mb(r['cleaned']['bytes'])} | {dropped} "
            f"| {r['deduped']['docs']} / {_mb(r['deduped']['bytes'])} "
            f"| {r['train']['docs']} / {_mb(r['train']['bytes'])} / {r['train']['tokens']} "
            f"| {r['val']['docs']} / {_mb(r['val']['bytes'])} / {r['val']['tokens']} |"
        )
    for key, what in (
        ("bad_utf8_bytes", "Invalid UTF-8 bytes"),
        ("boilerplate_lines", "Boilerplate lines removed"),
        ("null_docs", "Null texts skipped (parquet)"),
    ):
        found = {n: r.get(key, 0) for n, r in report["sources"].items() if r.get(key)}
        if found:
            lines += ["", f"{what}: " + ", ".join(f"{n} {c}" for n, c in found.items())]
    limited = [n for n, r in report["sources"].items() if r.get("stopped_at_limit")]
    if limited:
        lines += ["", "Stopped at max_bytes / max_docs: " + ", ".join(limited)]
    e = report["tokenizer_efficiency_val"]
    lines += [
        "",
        "Read MB are file bytes (headers included; parquet: text bytes); the other MB are UTF-8 "
        "bytes of cleaned text. Documents are dropped by the filters in the order listed, then as "
        "exact and near duplicates of earlier documents.",
        "",
        f"Validation split: {e['val_text_bytes']} bytes, {e['val_tokens']} tokens, {e['val_words']} "
        f"words: **{e['bytes_per_token']} bytes/token**, {e['tokens_per_word']} tokens/word "
        f"(byte-level: 1.0 bytes/token, {e['byte_level_tokens_per_word']} tokens/word).",
        "",
        "Seconds: " + ", ".join(f"{k} {v}" for k, v in report["seconds"].items()),
    ]
    if report.get("prepare_seconds"):
        lines.append(
            "Prepare, seconds: "
            + ", ".join(f"{k} {v}" for k, v in report["prepare_seconds"].items())
            + " (clean: summed over worker processes)"
        )
    return "\n".join(lines) + "\n"


def write_report(out_dir: Path, report: dict[str, Any]) -> None:
    md = format_report(report).encode()
    write_atomic({out_dir / "report.json": json_bytes(report), out_dir / "report.md": md})
