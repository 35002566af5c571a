"""The shard format: round trip, atomic writing, and every way a shard can be bad."""

from __future__ import annotations

import gc
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from enlace_config.schema.data import DataConfig
from enlace_data import DataError
from enlace_data.cli import main as cli_main
from enlace_data.loader import build_loader, eval_batches
from enlace_data.shards import (
    HEADER_SIZE,
    MAGIC,
    ShardWriter,
    list_shards,
    open_shard,
    open_shards,
    shard_name,
    write_shard,
)


def _write(
    path: Path,
    n: int = 500,
    *,
    vocab: int = 1000,
    tok: str = "sp-test",
    text_bytes: int | None = None,
):
    tokens = (np.arange(n) * 7) % vocab
    return write_shard(
        path, tokens, vocab_size=vocab, tokenizer_id=tok, text_bytes=text_bytes or 3 * n
    )


def _cfg(path: Path, T: int = 16) -> DataConfig:
    return DataConfig(kind="shards", path=str(path), context_length=T, eval_batches=2)


def test_round_trip_header_and_tokens(tmp_path: Path) -> None:
    p = tmp_path / shard_name("train", 0)
    tokens = np.random.default_rng(0).integers(0, 65536, size=10_000)
    write_shard(p, tokens, vocab_size=65536, tokenizer_id="sp-" + "a" * 64, text_bytes=41_000)
    s = open_shard(p)
    assert s.header.token_count == 10_000
    assert s.header.vocab_size == 65536
    assert s.header.tokenizer_id == "sp-" + "a" * 64
    assert s.header.text_bytes == 41_000
    assert s.header.bytes_per_token == pytest.approx(4.1)
    assert p.stat().st_size == HEADER_SIZE + 2 * 10_000
    np.testing.assert_array_equal(np.asarray(s.tokens()), tokens)
    np.testing.assert_array_equal(s.read(9_990, 10), tokens[9_990:])
    assert p.read_bytes()[:8] == MAGIC


def test_streaming_writer_accumulates(tmp_path: Path) -> None:
    p = tmp_path / "train_000001.shard"
    with ShardWriter(p, vocab_size=300, tokenizer_id="t") as w:
        w.write([1, 2, 3], text_bytes=5)
        w.write(np.array([299, 0]), text_bytes=2)
    s = open_shard(p)
    assert (s.header.token_count, s.header.text_bytes) == (5, 7)
    assert s.read(0, 5).tolist() == [1, 2, 3, 299, 0]


def test_writer_is_atomic_on_error(tmp_path: Path) -> None:
    p = tmp_path / "train_000000.shard"
    with pytest.raises(RuntimeError), ShardWriter(p, vocab_size=300, tokenizer_id="t") as w:
        w.write([1, 2, 3])
        assert not p.exists()  # nothing under the final name while writing
        raise RuntimeError("crash mid-shard")
    assert not p.exists()
    assert os.listdir(tmp_path) == []  # the temporary file is gone too


def test_writer_rejects_ids_outside_the_vocabulary(tmp_path: Path) -> None:
    p = tmp_path / "train_000000.shard"
    with pytest.raises(DataError, match=r"0\.\.299"):
        write_shard(p, [1, 300], vocab_size=300, tokenizer_id="t", text_bytes=2)
    with pytest.raises(DataError, match="65536"):
        write_shard(p, [1], vocab_size=70_000, tokenizer_id="t", text_bytes=1)
    assert os.listdir(tmp_path) == []


def test_list_shards_ignores_temporaries_and_other_splits(tmp_path: Path) -> None:
    for i in (2, 0, 1):
        _write(tmp_path / shard_name("train", i))
    _write(tmp_path / shard_name("val", 0))
    (tmp_path / ".train_000003.shard.abc.tmp").write_bytes(b"partial")
    (tmp_path / "manifest.json").write_text("{}")
    assert [p.name for p in list_shards(tmp_path, "train")] == [
        "train_000000.shard",
        "train_000001.shard",
        "train_000002.shard",
    ]
    assert [p.name for p in list_shards(tmp_path, "val")] == ["val_000000.shard"]


# ---------------------------------------------------------------------------- corrupt shards
def _corrupt(path: Path, how: str) -> None:
    raw = bytearray(path.read_bytes())
    if how == "magic":
        raw[:8] = b"NOTSHARD"
    elif how == "truncated_tokens":
        raw = raw[:-10]
    elif how == "truncated_header":
        raw = raw[:100]
    elif how == "trailing":
        raw += b"\0\0\0\0"
    elif how == "crc":
        raw[30] ^= 0xFF  # flips a bit in the token count; the CRC catches it
    elif how == "version":
        raw[8:12] = struct.pack("<I", 99)
    elif how == "empty":
        raw = bytearray()
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("magic", "wrong magic"),
        ("truncated_tokens", "truncated"),
        ("truncated_header", "truncated"),
        ("trailing", "after its"),
        ("crc", "CRC"),
        ("version", "version 99"),
        ("empty", "truncated"),
    ],
)
def test_corrupt_shard_is_a_clear_error_naming_the_file(
    tmp_path: Path, how: str, message: str
) -> None:
    good = tmp_path / shard_name("train", 0)
    bad = tmp_path / shard_name("train", 1)
    _write(good)
    _write(bad)
    _write(tmp_path / shard_name("val", 0))
    _corrupt(bad, how)
    with pytest.raises(DataError, match=message) as err:
        open_shard(bad)
    assert str(bad) in str(err.value)
    assert err.value.path == bad
    # The loader refuses at build time, before any batch, naming the same file.
    with pytest.raises(DataError, match=message) as err2:
        build_loader(_cfg(tmp_path), micro_batch_size=2, seed=0)
    assert str(bad) in str(err2.value)


def test_a_text_file_is_not_a_shard(tmp_path: Path) -> None:
    p = tmp_path / "train_000000.shard"
    p.write_text("hola " * 200)
    with pytest.raises(DataError, match="wrong magic"):
        open_shard(p)


def test_vocabulary_larger_than_the_model_is_refused(tmp_path: Path) -> None:
    _write(tmp_path / shard_name("train", 0), vocab=1000)
    _write(tmp_path / shard_name("val", 0), vocab=1000)
    assert open_shard(tmp_path / shard_name("train", 0), max_vocab_size=1000)
    with pytest.raises(DataError, match=r"model\.vocab_size=512") as err:
        build_loader(_cfg(tmp_path), micro_batch_size=2, seed=0, vocab_size=512)
    assert "train_000000.shard" in str(err.value)
    with pytest.raises(DataError, match=r"model\.vocab_size=512"):
        eval_batches(_cfg(tmp_path), micro_batch_size=2, vocab_size=512)
    assert (
        build_loader(_cfg(tmp_path), micro_batch_size=2, seed=0, vocab_size=1000).vocab_size == 1000
    )


@pytest.mark.parametrize("odd_one", ["train_000001.shard", "val_000000.shard"])
def test_shards_from_two_tokenizers_are_refused(tmp_path: Path, odd_one: str) -> None:
    for name in ("train_000000.shard", "train_000001.shard", "val_000000.shard"):
        _write(tmp_path / name, tok="sp-other" if name == odd_one else "sp-main")
    with pytest.raises(DataError, match="two tokenizers") as err:
        build_loader(_cfg(tmp_path), micro_batch_size=2, seed=0)
    assert (
        odd_one in str(err.value) and "sp-other" in str(err.value) and "sp-main" in str(err.value)
    )
    with pytest.raises(DataError, match="expected 'sp-main'"):
        open_shard(tmp_path / odd_one, tokenizer_id="sp-main")
    with pytest.raises(DataError, match="two tokenizers"):
        open_shards(sorted(tmp_path.glob("*.shard")))


def test_missing_shards_and_directory(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not a directory"):
        build_loader(_cfg(tmp_path / "nope"), micro_batch_size=2, seed=0)
    with pytest.raises(DataError, match="no train shards"):
        build_loader(_cfg(tmp_path), micro_batch_size=2, seed=0)
    with pytest.raises(DataError, match="does not exist"):
        open_shard(tmp_path / "train_000000.shard")


def test_shard_too_short_for_one_window(tmp_path: Path) -> None:
    _write(tmp_path / shard_name("train", 0), n=10)
    _write(tmp_path / shard_name("val", 0), n=10)
    with pytest.raises(DataError, match="no window"):
        build_loader(_cfg(tmp_path, T=16), micro_batch_size=2, seed=0)


def test_inspect_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path / shard_name("train", 0), n=100, text_bytes=400)
    assert cli_main(["inspect", str(tmp_path)]) == 0
    assert "1 shards OK: 100 tokens" in capsys.readouterr().out
    _corrupt(tmp_path / shard_name("train", 0), "magic")
    assert cli_main(["inspect", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "wrong magic" in err and "train_000000.shard" in err and "Traceback" not in err


def test_thousands_of_shards_hold_few_descriptors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "fsync", lambda fd: None)  # durability is not under test here
    for i in range(1500):
        write_shard(
            tmp_path / shard_name("train", i),
            np.arange(80) + i,
            vocab_size=2000,
            tokenizer_id="t",
            text_bytes=80,
        )
    write_shard(
        tmp_path / shard_name("val", 0),
        np.arange(80),
        vocab_size=2000,
        tokenizer_id="t",
        text_bytes=80,
    )
    # The descriptors this test opens, by number: another test's leftovers (a client's socket
    # closed by the garbage collector meanwhile) must not count for or against the loader.
    gc.collect()
    fds_before = set(os.listdir("/proc/self/fd"))
    for reader in ("pread", "mmap"):
        loader = build_loader(_cfg(tmp_path), micro_batch_size=8, seed=0, max_open=4, reader=reader)
        assert loader.samples_per_epoch == 1500 * 4  # (80 - 16) // 16 windows per shard
        for _ in range(50):
            next(loader)
        assert len(set(os.listdir("/proc/self/fd")) - fds_before) <= 4
        loader.close()
    assert set(os.listdir("/proc/self/fd")) - fds_before == set()
