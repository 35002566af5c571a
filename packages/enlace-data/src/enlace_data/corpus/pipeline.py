"""The corpus build: sources -> cleaning -> dedup -> split -> tokenizer -> shards -> manifest + report.

Layout of `out_dir` (the training config's `data.path`):

    train_000000.shard ...    uint16 shards (enlace_data.shards), what the loader reads
    val_000000.shard ...
    tokenizer.model, ...      the tokenizer files (enlace_data.tokenizer.files)
    manifest.json             written last: its presence means the build is complete
    report.json, report.md    documents and bytes in/out at each step, per source
    work/                     intermediates: cleaned documents per split, stage states

Each stage records a fingerprint of what decides its output; a rerun skips the stages whose
fingerprint matches (a crashed build resumes) and refuses an `out_dir` holding another build.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from enlace_config.schema.corpus import CorpusConfig
from tqdm import tqdm

from enlace_data._fs import json_bytes, write_atomic
from enlace_data.corpus.cleaning import FILTERS
from enlace_data.corpus.dedup import DedupIndex
from enlace_data.corpus.encode import (
    Encoder,
    SplitProgress,
    complete_recorded_shards,
    encode_split,
    remove_stale_temporaries,
)
from enlace_data.corpus.parallel import OrderedPool, init_prepare_worker, prepare_batch
from enlace_data.corpus.report import build_report, write_report
from enlace_data.corpus.sources import SourceReader, resolve_source_files
from enlace_data.errors import DataError
from enlace_data.shards import MANIFEST_FILE, SPLITS, list_shards
from enlace_data.tokenizer import Tokenizer, train_tokenizer
from enlace_data.tokenizer.files import MODEL_FILE

MANIFEST_FORMAT = "enlace-corpus"
MANIFEST_VERSION = 1
PIPELINE_VERSION = 1  # bump when a stage's output changes for the same config


def _hash(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


def _unit(*parts: str | bytes) -> float:
    """A deterministic number in [0, 1) from the parts."""
    h = hashlib.blake2b(digest_size=8)
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\x00")
    return int.from_bytes(h.digest(), "little") / 2**64


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _counter() -> dict[str, int]:
    return {"docs": 0, "bytes": 0}


class _PrepareRun:
    """The prepare stage's decisions, in document order: dedup (on disk), split, weights, writes.

    `seconds`: CPU seconds spent reading sources (main process), cleaning and filtering (summed
    over the worker processes) and deciding duplicates (main process), for per-core rates that
    other load on the machine does not distort (wall time would)."""

    def __init__(self, cfg: CorpusConfig, tmp: dict[str, Path], index: DedupIndex) -> None:
        self.cfg = cfg
        self.index = index
        self.files = {s: open(tmp[s], "w", encoding="utf-8") for s in SPLITS}  # noqa: SIM115
        self.extreme: dict[str, tuple[float, str] | None] = {"train": None, "val": None}
        self.seconds = {"read": 0.0, "clean": 0.0, "dedup": 0.0}

    def _batches(self, reader: SourceReader) -> Iterator[list[str]]:
        """The raw texts in batches of about encoding.batch_chars, the reading timed."""
        batch: list[str] = []
        size, t = 0, time.thread_time()
        for raw in reader:
            batch.append(raw.text)
            size += len(raw.text)
            if size >= self.cfg.encoding.batch_chars:
                self.seconds["read"] += time.thread_time() - t
                yield batch
                batch, size, t = [], 0, time.thread_time()
        self.seconds["read"] += time.thread_time() - t
        if batch:
            yield batch

    def source(self, i: int, reader: SourceReader, pool: OrderedPool, bar: Any) -> dict[str, Any]:
        st: dict[str, Any] = {
            "cleaned": _counter(),
            "dropped": {k: _counter() for k in (*FILTERS, "exact_duplicate", "near_duplicate")},
            "boilerplate_lines": 0,
            "deduped": _counter(),
            "train": {**_counter(), "words": 0},
            "val": {**_counter(), "words": 0},
        }
        last = 0
        for _, (results, seconds) in pool.map(prepare_batch, self._batches(reader)):
            self.seconds["clean"] += seconds
            bar.update(reader.stats.bytes - last)
            last = reader.stats.bytes
            for text, nbytes, reason, key, sig, removed in results:
                st["boilerplate_lines"] += removed
                if reason is None:
                    st["cleaned"]["docs"] += 1
                    st["cleaned"]["bytes"] += nbytes
                    t = time.thread_time()
                    reason = self.index.check(key, sig)
                    self.seconds["dedup"] += time.thread_time() - t
                if reason is not None:
                    st["dropped"][reason]["docs"] += 1
                    st["dropped"][reason]["bytes"] += nbytes
                    continue
                st["deduped"]["docs"] += 1
                st["deduped"]["bytes"] += nbytes
                self._write(i, reader.source.weight, text, nbytes, key, st)
        st["read"] = reader.stats.__dict__.copy()
        return st

    def _write(
        self, i: int, weight: float, text: str, nbytes: int, key: bytes, st: dict[str, Any]
    ) -> None:
        u = _unit(self.cfg.split.salt, key)
        split = "val" if u < self.cfg.split.val_fraction else "train"
        # A weight of 2.3 writes a train document twice, and a third time with probability 0.3.
        extra = _unit("weight", key) < weight - int(weight)
        reps = int(weight) + int(extra) if split == "train" else 1
        line = json.dumps({"s": i, "t": text, "r": reps, "k": key.hex()}, ensure_ascii=False)
        self.files[split].write(line + "\n")
        st[split]["docs"] += 1
        st[split]["bytes"] += nbytes
        st[split]["words"] += len(text.split())
        # The document nearest the split boundary, in case a split stays empty.
        score = u if split == "train" else -u
        e = self.extreme[split]
        if e is None or score < e[0]:
            self.extreme[split] = (score, line)

    def close(self) -> None:
        for f in self.files.values():
            f.close()
        self.index.close()


class CorpusBuild:
    def __init__(
        self,
        cfg: CorpusConfig,
        *,
        config_file: str = "<config>",
        progress: bool | None = None,
        log: Any = print,
    ) -> None:
        self.cfg = cfg
        self.config_file = config_file
        self.out = Path(os.path.expandvars(cfg.out_dir))
        self.work = self.out / "work"
        self.progress_disabled = None if progress is None else not progress
        self.log = log
        self.names = [s.name for s in cfg.sources]

    def _bar(self, desc: str, total: int | None = None) -> Any:
        return tqdm(
            desc=desc, unit="B", unit_scale=True, disable=self.progress_disabled, total=total
        )

    # --- fingerprints -----------------------------------------------------------------------
    def _prepare_fp(self) -> str:
        files = []
        for i, s in enumerate(self.cfg.sources):
            if s.kind == "hub":  # described by its config (pin `revision` to freeze it)
                continue
            for f in resolve_source_files(s, i, self.config_file):
                st = f.stat()
                files.append([s.name, str(f), st.st_size, st.st_mtime_ns])
        c = self.cfg
        stages = (c.cleaning, c.dedup, c.split)
        return _hash(
            PIPELINE_VERSION,
            [s.model_dump() for s in c.sources],
            files,
            *(s.model_dump() for s in stages),
        )

    # --- stage 1: read, clean, dedup, split ---------------------------------------------------
    def prepare(self, fp: str) -> dict[str, Any]:
        state_file = self.work / "prepare.json"
        done = _read_json(state_file)
        if done and done.get("fingerprint") == fp:
            self.log(f"prepare: up to date ({state_file})")
            return done
        cfg = self.cfg
        created_out = not self.out.exists()
        self.work.mkdir(parents=True, exist_ok=True)
        tmp = {s: self.work / f".docs-{s}.jsonl.tmp" for s in SPLITS}
        stats: dict[str, Any] = {}
        t0 = time.perf_counter()
        run = _PrepareRun(cfg, tmp, DedupIndex(cfg.dedup, self.work / "dedup.sqlite"))
        bar = self._bar("prepare")
        pool: OrderedPool | None = None
        try:
            try:
                # Cleaning, filters, keys and signatures in the workers; decisions here, in order.
                pool = OrderedPool(
                    cfg.encoding.workers,
                    init_prepare_worker,
                    (cfg.cleaning.model_dump(), cfg.dedup.model_dump() if cfg.dedup.near else None),
                )
                for i, source in enumerate(cfg.sources):
                    reader = SourceReader(source, i, cfg.cleaning, self.config_file)
                    stats[source.name] = run.source(i, reader, pool, bar)
            finally:
                bar.close()
                if pool is not None:
                    pool.close()
                run.close()
            total = {s: sum(v[s]["docs"] for v in stats.values()) for s in SPLITS}
            if total["train"] + total["val"] < 2:
                self._empty_corpus(stats)
            for empty, other in (("val", "train"), ("train", "val")):
                if total[empty] == 0:
                    self._move_one(run.extreme[other], tmp, stats, other, empty)
        except BaseException:
            for p in tmp.values():
                p.unlink(missing_ok=True)
            if created_out:
                shutil.rmtree(self.out, ignore_errors=True)
            raise
        for s in SPLITS:
            os.replace(tmp[s], self.work / f"docs-{s}.jsonl")
        result = {
            "fingerprint": fp,
            "seconds": round(time.perf_counter() - t0, 3),
            "stage_seconds": {k: round(v, 3) for k, v in run.seconds.items()},
            "sources": stats,
            "near_dedup": (
                {"bands": run.index.bands, "rows": run.index.rows} if cfg.dedup.near else None
            ),
        }
        write_atomic({state_file: json_bytes(result)})
        return result

    def _empty_corpus(self, stats: dict[str, Any]) -> None:
        read = sum(v["read"]["docs"] for v in stats.values())
        drops: dict[str, int] = {}
        for v in stats.values():
            for k, c in v["dropped"].items():
                drops[k] = drops.get(k, 0) + c["docs"]
        why = ", ".join(f"{k} {n}" for k, n in drops.items() if n) or "nothing dropped"
        raise DataError(
            f"the corpus is empty: {read} documents read from {len(stats)} source(s), fewer than 2 "
            f"left after cleaning and deduplication ({why}). Check the sources' paths and formats, "
            f"or lower the thresholds under cleaning: in {self.config_file}"
        )

    def _move_one(
        self,
        extreme: tuple[float, str] | None,
        tmp: dict[str, Path],
        stats: dict[str, Any],
        src_split: str,
        dst_split: str,
    ) -> None:
        """Move the document nearest the split boundary so that no split is empty (tiny corpora)."""
        assert extreme is not None
        line, src, dst = extreme[1], tmp[src_split], tmp[dst_split]
        rest = src.with_name(src.name + ".rest")
        with open(src, encoding="utf-8") as fi, open(rest, "w", encoding="utf-8") as fo:
            moved = False
            for ln in fi:
                if not moved and ln.rstrip("\n") == line:
                    moved = True
                    continue
                fo.write(ln)
        os.replace(rest, src)
        d = json.loads(line)
        d["r"] = 1
        with open(dst, "a", encoding="utf-8") as f:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
        st = stats[self.names[d["s"]]]
        n, w = len(d["t"].encode("utf-8")), len(d["t"].split())
        for split, sign in ((src_split, -1), (dst_split, 1)):
            st[split]["docs"] += sign
            st[split]["bytes"] += sign * n
            st[split]["words"] += sign * w

    # --- stage 2: tokenizer -------------------------------------------------------------------
    def tokenizer(self, fp: str, prepared: dict[str, Any]) -> Tokenizer:
        tcfg = self.cfg.tokenizer
        state_file = self.work / "tokenizer.json"
        if tcfg.path is not None:
            tok = Tokenizer.from_file(os.path.expandvars(tcfg.path))
            tok.save(self.out)
            return tok
        done = _read_json(state_file)
        if done and done.get("fingerprint") == fp and (self.out / MODEL_FILE).is_file():
            tok = Tokenizer.from_file(self.out / MODEL_FILE)
            if tok.tokenizer_id == done.get("tokenizer_id"):
                self.log(f"tokenizer: up to date ({tok.tokenizer_id})")
                return tok
        train_chars = sum(v["train"]["bytes"] for v in prepared["sources"].values())
        p = min(1.0, tcfg.sample_chars / max(1, train_chars))
        sampled = [0]

        def lines() -> Iterator[str]:
            with open(self.work / "docs-train.jsonl", encoding="utf-8") as f:
                for raw in f:
                    d = json.loads(raw)
                    if p < 1.0 and _unit(str(tcfg.seed), d["k"]) >= p:
                        continue
                    sampled[0] += len(d["t"])
                    yield from d["t"].split("\n")

        t0 = time.perf_counter()
        self.log(
            f"tokenizer: training {tcfg.model_type} vocab {tcfg.vocab_size} on ~{p:.0%} of train"
        )
        options = {"vocab_size", "model_type", "num_threads", "character_coverage"}
        tok = train_tokenizer(lines(), **tcfg.model_dump(include=options))
        tok.save(self.out)
        done = {"fingerprint": fp, "tokenizer_id": tok.tokenizer_id, "sample_chars": sampled[0]}
        done["seconds"] = round(time.perf_counter() - t0, 3)
        write_atomic({state_file: json_bytes(done)})
        return tok

    # --- stage 3: shards ------------------------------------------------------------------------
    def encode(self, fp: str, prepared: dict[str, Any], tok: Tokenizer) -> dict[str, SplitProgress]:
        enc = self.cfg.encoding
        state_file = self.work / "encode-state.json"
        state = _read_json(state_file)
        if not state or state.get("fingerprint") != fp:
            if any(list_shards(self.out, s) for s in SPLITS):
                raise DataError(
                    f"{self.out} already holds shards of a different build (other config, sources "
                    f"or tokenizer); delete the folder or choose another out_dir in {self.config_file}",
                    path=self.out,
                )
            state = {"fingerprint": fp, "splits": {}}
        progs = {s: SplitProgress.from_json(p) for s, p in state["splits"].items()}
        if completed := sum(complete_recorded_shards(self.out, p) for p in progs.values()):
            self.log(f"encode: completed {completed} recorded shard(s) a kill left unrenamed")
        if removed := remove_stale_temporaries(self.out):
            self.log(
                f"encode: removed {removed} unfinished temporary shard(s) of an interrupted build"
            )
        max_reps = {"train": max(math.ceil(s.weight) for s in self.cfg.sources), "val": 1}
        todo = [s for s in ("val", "train") if not (s in progs and progs[s].done)]
        encoder = Encoder(tok, self.out / MODEL_FILE, enc.workers if todo else 1)
        try:
            for split in todo:
                prog = progs.setdefault(split, SplitProgress(split))
                if prog.shards:
                    self.log(f"encode {split}: resuming after {len(prog.shards)} finished shard(s)")
                # Progress in text bytes; train documents are written `weight` times on average.
                total = sum(
                    v[split]["bytes"] * (src.weight if split == "train" else 1.0)
                    for src, v in zip(self.cfg.sources, prepared["sources"].values(), strict=True)
                )
                bar = self._bar(f"encode {split}", total=int(total))

                def save(p: SplitProgress, split: str = split) -> None:
                    state["splits"][split] = p.to_json()
                    write_atomic({state_file: json_bytes(state)})

                try:
                    progs[split] = encode_split(
                        out_dir=self.out,
                        docs_file=self.work / f"docs-{split}.jsonl",
                        progress=prog,
                        passes=max_reps[split],
                        source_names=self.names,
                        tok=tok,
                        encoder=encoder,
                        shard_tokens=enc.shard_tokens,
                        batch_chars=enc.batch_chars,
                        save_state=save,
                        on_bytes=bar.update,
                    )
                finally:
                    bar.close()
        finally:
            encoder.close()
        return progs

    # --- all of it ----------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        manifest_path = self.out / MANIFEST_FILE
        t0 = time.perf_counter()
        prep_fp = self._prepare_fp()
        tok_fp = _hash(prep_fp, self.cfg.tokenizer.model_dump())
        old = _read_json(manifest_path)
        if old is not None:
            fps, encoding = old.get("fingerprints", {}), old.get("config", {}).get("encoding", {})
            built = (fps.get("prepare"), fps.get("tokenizer"), encoding.get("shard_tokens"))
            if built == (prep_fp, tok_fp, self.cfg.encoding.shard_tokens):
                self.log(f"corpus {self.cfg.name}: already built in {self.out} (manifest.json)")
                return old
            raise DataError(
                f"{self.out} holds a finished build of a different config or of source files "
                f"that have changed since; delete the folder to rebuild, or choose another "
                f"out_dir in {self.config_file}",
                path=self.out,
            )
        prepared = self.prepare(prep_fp)
        timings = {"prepare": prepared["seconds"]}
        t1 = time.perf_counter()
        tok = self.tokenizer(tok_fp, prepared)
        enc_fp = _hash(tok_fp, tok.tokenizer_id, self.cfg.encoding.shard_tokens)
        t2 = time.perf_counter()
        splits = self.encode(enc_fp, prepared, tok)
        t3 = time.perf_counter()
        timings |= {
            "tokenizer": round(t2 - t1, 3),
            "encode": round(t3 - t2, 3),
            "total": round(t3 - t0, 3),
        }
        manifest = self._manifest(prep_fp, tok_fp, enc_fp, tok, splits)
        report = build_report(self.cfg, prepared, splits, tok, timings)
        write_report(self.out, report)
        write_atomic({manifest_path: json_bytes(manifest)})
        return manifest

    def _manifest(
        self,
        prep_fp: str,
        tok_fp: str,
        enc_fp: str,
        tok: Tokenizer,
        splits: dict[str, SplitProgress],
    ) -> dict[str, Any]:
        from enlace_data import __version__

        out_splits: dict[str, Any] = {}
        for split, prog in splits.items():
            tokens = sum(s["tokens"] for s in prog.shards)
            text_bytes = sum(s["text_bytes"] for s in prog.shards)
            out_splits[split] = {
                "shards": [{k: v for k, v in s.items() if k != "tmp"} for s in prog.shards],
                "tokens": tokens,
                "text_bytes": text_bytes,
                "documents": sum(s["documents"] for s in prog.shards),
                "bytes_per_token": round(text_bytes / tokens, 6) if tokens else 0.0,
                "sources": prog.sources,
            }
        return {
            "format": MANIFEST_FORMAT,
            "version": MANIFEST_VERSION,
            "name": self.cfg.name,
            "created_by": f"enlace-data {__version__}",
            "tokenizer": {**tok.info(), "file": MODEL_FILE},
            "vocab_size": tok.vocab_size,
            "tokenizer_id": tok.tokenizer_id,
            "document_separator": f"<|endoftext|> (id {tok.eot_id}) before every document",
            "splits": out_splits,
            "fingerprints": {"prepare": prep_fp, "tokenizer": tok_fp, "encode": enc_fp},
            "config": self.cfg.model_dump(mode="json"),
        }


def build_corpus(
    cfg: CorpusConfig,
    *,
    config_file: str = "<config>",
    progress: bool | None = None,
    log: Any = print,
) -> dict[str, Any]:
    """Run (or resume) the whole build; returns the manifest."""
    return CorpusBuild(cfg, config_file=config_file, progress=progress, log=log).run()
