"""The loader contract: shapes, order, exact resume, rank splits, refusals, validation batches."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from enlace_config.schema.data import DataConfig
from enlace_data import DataError
from enlace_data.loader import (
    Loader,
    Permutation,
    build_loader,
    eval_batches,
    split_bytes_per_token,
)
from enlace_data.sample import builtin_split
from enlace_data.shards import shard_name, write_shard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

T = 8


def _make_shards(root: Path, lengths: list[int], val_lengths: tuple[int, ...] = (60, 45)) -> Path:
    """Shards whose tokens are all distinct (a running counter), so each window is identifiable."""
    root.mkdir(parents=True, exist_ok=True)
    start = 0
    for split, lens in (("train", lengths), ("val", val_lengths)):
        for i, n in enumerate(lens):
            write_shard(
                root / shard_name(split, i),
                np.arange(start, start + n),
                vocab_size=65536,
                tokenizer_id="sp-test",
                text_bytes=4 * n,
            )
            start += n
    return root


def _make_bytes(root: Path, train: bytes, val: bytes) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "train.txt").write_bytes(train)
    (root / "val.txt").write_bytes(val)
    return root


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, DataConfig]:
    base = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(0)
    # Uneven shards (one too short for any window) so windows straddle nothing and epochs are short.
    shards = _make_shards(base / "shards", [100, 7, 57, 33, 90])
    text = bytes(rng.integers(0, 256, size=700, dtype=np.uint8))
    byts = _make_bytes(base / "bytes", text[:600], text[600:])
    return {
        "shards": DataConfig(kind="shards", path=str(shards), context_length=T, eval_batches=3),
        "bytes": DataConfig(kind="bytes", path=str(byts), context_length=T, eval_batches=3),
        "builtin": DataConfig(
            kind="bytes",
            path=str(base / "missing"),
            fallback="builtin",
            context_length=T,
            eval_batches=3,
        ),
    }


def _take(loader: Loader, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    return [next(loader) for _ in range(n)]


def test_batches_are_int64_inputs_and_shifted_targets(sources: dict[str, DataConfig]) -> None:
    for cfg in sources.values():
        x, y = next(build_loader(cfg, micro_batch_size=3, seed=1))
        assert x.shape == y.shape == (3, T)
        assert x.dtype == y.dtype == np.int64
        assert x.flags.c_contiguous and y.flags.c_contiguous
        np.testing.assert_array_equal(x[:, 1:], y[:, :-1])


def test_shard_windows_come_from_one_shard_on_a_per_epoch_grid(
    sources: dict[str, DataConfig],
) -> None:
    loader = build_loader(sources["shards"], micro_batch_size=2, seed=3)
    n = loader.samples_per_epoch
    # Windows per shard: (len - T) // T -> 11, 0, 6, 3, 10.
    assert n == 11 + 0 + 6 + 3 + 10
    shard_starts = [0, 100, 107, 164, 197]
    shard_ends = [100, 107, 164, 197, 287]
    phases = []
    for _epoch in range(4):
        starts, phase = set(), set()
        for x, y in _take(loader, n // 2):
            for row_x, row_y in zip(x, y, strict=True):
                first, last = int(row_x[0]), int(row_y[-1])
                assert last - first == T  # consecutive tokens: never across a shard boundary
                k = max(i for i, s in enumerate(shard_starts) if s <= first)
                assert last < shard_ends[k]
                phase.add((first - shard_starts[k]) % T)
                starts.add(first)
        assert len(starts) == n  # every window once per epoch
        assert len(phase) == 1  # one grid per epoch ...
        phases.append(phase.pop())
    assert len(set(phases)) > 1  # ... shifted between epochs


def test_each_epoch_is_a_permutation_and_epochs_differ(sources: dict[str, DataConfig]) -> None:
    loader = build_loader(sources["shards"], micro_batch_size=1, seed=5)
    n = loader.samples_per_epoch
    shard_starts = [0, 100, 107, 164, 197]

    def window(first: int) -> tuple[int, int]:  # (shard, j) whatever the epoch's phase
        k = max(i for i, s in enumerate(shard_starts) if s <= first)
        return k, (first - shard_starts[k]) // T

    epochs = [[window(int(next(loader)[0][0, 0])) for _ in range(n)] for _ in range(3)]
    assert all(sorted(e) == sorted(epochs[0]) for e in epochs)
    assert len(set(epochs[0])) == n
    assert epochs[0] != epochs[1] != epochs[2]
    other_seed = build_loader(sources["shards"], micro_batch_size=1, seed=6)
    assert [window(int(next(other_seed)[0][0, 0])) for _ in range(n)] != epochs[0]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 17, 64, 1000, 4097])
def test_permutation_is_a_bijection(n: int) -> None:
    out = Permutation(n, key=42)(np.arange(n))
    assert sorted(out.tolist()) == list(range(n))
    if n > 16:
        assert out.tolist() != list(range(n))


def test_a_permutation_of_nothing_is_refused_not_an_endless_walk() -> None:
    with pytest.raises(ValueError, match="n must be positive"):
        Permutation(0, key=42)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    kind=st.sampled_from(["shards", "bytes", "builtin"]),
    k=st.integers(0, 40),
    m=st.integers(1, 8),
    batch=st.integers(1, 5),
    seed=st.integers(0, 2**31),
    world_rank=st.sampled_from([(1, 0), (2, 0), (2, 1), (3, 2)]),
)
def test_resume_continues_exactly(
    sources: dict[str, DataConfig],
    kind: str,
    k: int,
    m: int,
    batch: int,
    seed: int,
    world_rank: tuple[int, int],
) -> None:
    """Advance k, save, rebuild, load, compare the next m with an uninterrupted loader.

    The shard and bytes sets hold 30 and 74 windows: k up to 40 batches of up to 5 (times the
    world size) crosses shard and epoch boundaries many times.
    """
    cfg = sources[kind]
    world, rank = world_rank

    def make() -> Loader:
        return build_loader(cfg, micro_batch_size=batch, seed=seed, rank=rank, world_size=world)

    reference = _take(make(), k + m)
    first = make()
    _take(first, k)
    state = json.loads(json.dumps(first.state_dict()))
    assert state["samples_consumed"] == k * batch * world
    resumed = make()
    resumed.load_state_dict(state)
    for (x, y), (rx, ry) in zip(_take(resumed, m), reference[k:], strict=True):
        np.testing.assert_array_equal(x, rx)
        np.testing.assert_array_equal(y, ry)


@pytest.mark.parametrize("kind", ["shards", "bytes"])
@pytest.mark.parametrize("world", [2, 3])
def test_rank_splits_are_disjoint_and_cover_the_stream(
    sources: dict[str, DataConfig], kind: str, world: int
) -> None:
    cfg, B, steps = sources[kind], 2, 20
    single = build_loader(cfg, micro_batch_size=B * world, seed=9)
    ranks = [
        build_loader(cfg, micro_batch_size=B, seed=9, rank=r, world_size=world)
        for r in range(world)
    ]
    for _ in range(steps):
        x, _ = next(single)
        parts = [next(r)[0] for r in ranks]
        np.testing.assert_array_equal(np.concatenate(parts), x)
    # One epoch with rank-local batches: each window appears once in total.
    n = ranks[0].samples_per_epoch
    fresh = [
        build_loader(cfg, micro_batch_size=1, seed=9, rank=r, world_size=world)
        for r in range(world)
    ]
    seen = [tuple(next(fresh[i % world])[0][0].tolist()) for i in range(n - n % world)]
    assert len(set(seen)) == len(seen)


def test_state_re_splits_to_another_world_size(sources: dict[str, DataConfig]) -> None:
    cfg = sources["shards"]
    ranks = [build_loader(cfg, micro_batch_size=2, seed=4, rank=r, world_size=2) for r in range(2)]
    for r in ranks:
        _take(r, 7)
    state = ranks[0].state_dict()
    assert state == ranks[1].state_dict()
    single = build_loader(cfg, micro_batch_size=4, seed=4)
    single.load_state_dict(state)
    x, _ = next(single)
    np.testing.assert_array_equal(x, np.concatenate([next(r)[0] for r in ranks]))


def test_state_from_other_data_or_settings_is_refused(
    sources: dict[str, DataConfig], tmp_path: Path
) -> None:
    loader = build_loader(sources["shards"], micro_batch_size=2, seed=1)
    _take(loader, 3)
    state = loader.state_dict()

    with pytest.raises(DataError, match="other data"):
        build_loader(sources["bytes"], micro_batch_size=2, seed=1).load_state_dict(state)
    with pytest.raises(DataError, match="seed"):
        build_loader(sources["shards"], micro_batch_size=2, seed=2).load_state_dict(state)
    longer = sources["shards"].model_copy(update={"context_length": T + 1})
    with pytest.raises(DataError, match="context_length"):
        build_loader(longer, micro_batch_size=2, seed=1).load_state_dict(state)
    with pytest.raises(DataError, match="split"):
        build_loader(sources["shards"], split="val", micro_batch_size=2, seed=1).load_state_dict(
            state
        )
    # Same names, one shard longer: other files.
    changed = _make_shards(tmp_path / "changed", [100, 7, 57, 33, 91])
    cfg2 = sources["shards"].model_copy(update={"path": str(changed)})
    with pytest.raises(DataError, match="refusing to resume"):
        build_loader(cfg2, micro_batch_size=2, seed=1).load_state_dict(state)
    # Same size, other bytes.
    bdir = Path(sources["bytes"].path)
    other = _make_bytes(tmp_path / "b2", b"x" * 600, (bdir / "val.txt").read_bytes())
    bstate = build_loader(sources["bytes"], micro_batch_size=2, seed=1).state_dict()
    cfg3 = sources["bytes"].model_copy(update={"path": str(other)})
    with pytest.raises(DataError, match="other data"):
        build_loader(cfg3, micro_batch_size=2, seed=1).load_state_dict(bstate)
    with pytest.raises(DataError, match="format"):
        loader.load_state_dict({"samples_consumed": 3})
    with pytest.raises(DataError, match="non-negative"):
        loader.load_state_dict({**state, "samples_consumed": -1})


def test_val_loader_is_one_ordered_pass(sources: dict[str, DataConfig]) -> None:
    loader = build_loader(sources["shards"], split="val", micro_batch_size=2, seed=0)
    firsts = [int(v) for x, _ in loader for v in x[:, 0]]
    # val shards of 60 and 45 tokens -> 6 + 4 windows, in file order at phase 0; 5 batches.
    assert firsts == [287 + 8 * i for i in range(6)] + [347 + 8 * i for i in range(4)]


def test_eval_batches_are_fixed_from_val_and_spread(sources: dict[str, DataConfig]) -> None:
    cfg = sources["shards"]
    a = eval_batches(cfg, micro_batch_size=4)
    b = eval_batches(cfg, micro_batch_size=4)
    assert len(a) == cfg.eval_batches
    for (xa, ya), (xb, yb) in zip(a, b, strict=True):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)
        assert xa.shape == (4, T) and xa.dtype == np.int64
    val_tokens = set(range(287, 287 + 105))
    firsts = [int(v) for x, y in a for v in x[:, 0]]
    for x, y in a:
        assert set(x.ravel().tolist()) <= val_tokens and set(y.ravel().tolist()) <= val_tokens
        np.testing.assert_array_equal(y[:, -1] - x[:, 0], T)  # never across the two val shards
    assert firsts == sorted(firsts) and len(set(firsts)) == len(firsts)
    assert max(firsts) - min(firsts) > 60  # spread over both val shards
    # Ranks split the same windows.
    r0 = eval_batches(cfg, micro_batch_size=2, rank=0, world_size=2)
    r1 = eval_batches(cfg, micro_batch_size=2, rank=1, world_size=2)
    assert len(r0) == len(r1) == cfg.eval_batches
    both = {int(v) for batches in (r0, r1) for x, _ in batches for v in x[:, 0]}
    assert len(both) == 2 * 2 * cfg.eval_batches


def test_bytes_per_token_and_description(sources: dict[str, DataConfig]) -> None:
    shards = build_loader(sources["shards"], micro_batch_size=1, seed=0)
    assert shards.bytes_per_token == pytest.approx(4.0)
    assert shards.description.startswith("shards ") and shards.tokenizer_id == "sp-test"
    byts = build_loader(sources["bytes"], micro_batch_size=1, seed=0)
    assert byts.bytes_per_token == 1.0
    assert byts.description == f"prepared corpus {sources['bytes'].path}"
    assert build_loader(sources["builtin"], micro_batch_size=1, seed=0).description.startswith(
        "built-in books"
    )
    # without building a loader: what the trainer turns nats/token into bits/byte with
    val = build_loader(sources["shards"], split="val", micro_batch_size=1, seed=0)
    assert split_bytes_per_token(sources["shards"], "val") == val.bytes_per_token
    assert split_bytes_per_token(sources["bytes"], "val") == 1.0


def test_train_and_val_never_overlap(sources: dict[str, DataConfig]) -> None:
    # Shards: distinct token values per split, so any shared token would be an overlap.
    tr = build_loader(sources["shards"], micro_batch_size=1, seed=0)
    train_tokens = {int(t) for _ in range(tr.samples_per_epoch) for t in next(tr)[1][0]}
    val_tokens = {
        int(t) for x, y in eval_batches(sources["shards"], micro_batch_size=4) for t in y.ravel()
    }
    assert train_tokens and val_tokens and not train_tokens & val_tokens


def test_builtin_books_are_the_prepared_smoke_corpus(tmp_path: Path) -> None:
    """The embedded texts equal what `enlace-data smoke --from` makes of the shared books."""
    import os

    shared = os.environ.get("ENLACE_SHARED_DATA")
    if not shared or not (Path(shared) / "es-pd").is_dir():
        pytest.skip("ENLACE_SHARED_DATA/es-pd (the public-domain books) is not available")
    from enlace_data.cli import main as data_cli

    assert data_cli(["smoke", "--from", str(Path(shared) / "es-pd"), "--out", str(tmp_path)]) == 0
    for split in ("train", "val"):
        assert builtin_split(split) == (tmp_path / f"{split}.txt").read_bytes(), split


def test_builtin_books_are_substantial_spanish_nfc_without_trademark() -> None:
    import unicodedata

    train, val = builtin_split("train"), builtin_split("val")
    assert len(train) > 8_000_000 and 0.03 < len(val) / (len(train) + len(val)) < 0.08
    text = (train + val).decode("utf-8")
    assert unicodedata.is_normalized("NFC", text) and "\r" not in text
    assert "gutenberg" not in text.lower()
    for word in (" que ", " la ", "ñ", "¿", "—", "Sancho"):
        assert word in text


def test_damaged_builtin_books_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from enlace_data import sample

    sample.builtin_split.cache_clear()
    monkeypatch.setitem(sample.SHA256, "val", "0" * 64)
    try:
        with pytest.raises(DataError, match="damaged"):
            sample.builtin_split("val")
    finally:
        sample.builtin_split.cache_clear()


def test_missing_bytes_data_is_explained(tmp_path: Path) -> None:
    cfg = DataConfig(kind="bytes", path=str(tmp_path / "nope"), context_length=T)
    with pytest.raises(DataError, match="enlace-data smoke") as err:
        build_loader(cfg, micro_batch_size=1, seed=0)
    assert "fallback" in str(err.value)
    _make_bytes(tmp_path / "half", b"a" * 100, b"")
    (tmp_path / "half" / "val.txt").unlink()
    cfg = DataConfig(kind="bytes", path=str(tmp_path / "half"), context_length=T)
    with pytest.raises(DataError, match=r"missing val\.txt"):
        eval_batches(cfg, micro_batch_size=1)
    with pytest.raises(DataError, match="vocab_size >= 256"):
        build_loader(cfg, micro_batch_size=1, seed=0, vocab_size=128)


def test_shard_maps_stay_bounded(sources: dict[str, DataConfig]) -> None:
    loader = build_loader(sources["shards"], micro_batch_size=4, seed=0, max_open=2)
    _take(loader, 20)
    assert loader._source.open_handles <= 2  # type: ignore[attr-defined]


def test_mmap_and_pread_readers_agree(sources: dict[str, DataConfig]) -> None:
    a = build_loader(sources["shards"], micro_batch_size=3, seed=2, reader="pread", max_open=2)
    b = build_loader(sources["shards"], micro_batch_size=3, seed=2, reader="mmap", max_open=2)
    for (xa, ya), (xb, yb) in zip(_take(a, 30), _take(b, 30), strict=True):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)
    assert b._source.open_handles <= 2  # type: ignore[attr-defined]


def test_shard_truncated_while_training_is_an_error(tmp_path: Path) -> None:
    root = _make_shards(tmp_path / "s", [100, 100])
    cfg = DataConfig(kind="shards", path=str(root), context_length=T, eval_batches=1)
    loader = build_loader(cfg, micro_batch_size=4, seed=0)
    next(loader)
    loader.close()
    with open(root / "train_000001.shard", "r+b") as f:
        f.truncate(256 + 20)
    with pytest.raises(DataError, match="short read") as err:
        _take(loader, 10)
    assert "train_000001.shard" in str(err.value)


def test_short_segments_keep_one_window_inside_them(tmp_path: Path) -> None:
    # Shards of T+1..2T-1 tokens hold one window; its phase shift must stay inside the shard.
    lengths = [T + 1, T + 3, 2 * T - 1]
    root = _make_shards(tmp_path / "short", lengths, val_lengths=(T + 1,))
    cfg = DataConfig(kind="shards", path=str(root), context_length=T, eval_batches=1)
    loader = build_loader(cfg, micro_batch_size=1, seed=0)
    assert loader.samples_per_epoch == 3
    ends = np.cumsum(lengths).tolist()
    for _ in range(40):  # many epochs, many phases
        x, y = next(loader)
        first, last = int(x[0, 0]), int(y[0, -1])
        k = next(i for i, e in enumerate(ends) if first < e)
        assert last == first + T and last < ends[k]


def test_window_ids_number_each_epochs_windows_once(sources: dict[str, DataConfig]) -> None:
    loader = build_loader(sources["shards"], micro_batch_size=1, seed=8)
    n = loader.samples_per_epoch
    for epoch in range(3):
        ids = loader.window_ids(np.arange(epoch * n, (epoch + 1) * n))
        assert sorted(ids.tolist()) == list(range(n))
    segs, starts = loader.locations(np.arange(n))
    assert len(set(zip(segs.tolist(), starts.tolist(), strict=True))) == n


@pytest.mark.parametrize("block", [1, 7, 4096])
def test_order_blocks_match_the_permutation(
    sources: dict[str, DataConfig], monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    import enlace_data.loader as loader_module

    monkeypatch.setattr(loader_module, "ORDER_BLOCK", block)
    for batch in (1, 4, 16):
        loader = build_loader(sources["shards"], micro_batch_size=batch, seed=11)
        n = loader.samples_per_epoch
        expected = np.concatenate(
            [loader._permutation(e)(np.arange(n)) for e in range(4)]  # type: ignore[attr-defined]
        )
        got = np.concatenate(
            [loader.window_ids(np.arange(i, min(i + batch, 4 * n))) for i in range(0, 4 * n, batch)]
        )
        np.testing.assert_array_equal(got, expected)
    # and resuming mid-block gives the same batches
    reference = _take(build_loader(sources["bytes"], micro_batch_size=3, seed=1), 40)
    first = build_loader(sources["bytes"], micro_batch_size=3, seed=1)
    _take(first, 23)
    resumed = build_loader(sources["bytes"], micro_batch_size=3, seed=1)
    resumed.load_state_dict(first.state_dict())
    for (x, _), (rx, _) in zip(_take(resumed, 17), reference[23:], strict=True):
        np.testing.assert_array_equal(x, rx)


def _poke_token(path: Path, index: int, value: int) -> None:
    """Overwrite token `index` of a shard in place (the header and its CRC stay as they were)."""
    with open(path, "r+b") as f:
        f.seek(256 + 2 * index)
        f.write(int(value).to_bytes(2, "little"))


@pytest.mark.parametrize("split", ["train", "val"])
def test_token_id_at_or_above_the_vocabulary_names_shard_id_and_vocab(
    tmp_path: Path, split: str
) -> None:
    root = tmp_path / "s"
    root.mkdir()
    for s in ("train", "val"):
        write_shard(
            root / shard_name(s, 0),
            np.arange(100) % 512,
            vocab_size=512,
            tokenizer_id="sp-test",
            text_bytes=400,
        )
    _poke_token(root / shard_name(split, 0), 37, 512)
    cfg = DataConfig(kind="shards", path=str(root), context_length=T, eval_batches=2)
    with pytest.raises(DataError) as err:
        if split == "val":
            eval_batches(cfg, micro_batch_size=4, vocab_size=512)
        else:
            loader = build_loader(cfg, micro_batch_size=4, seed=0, vocab_size=512)
            for _ in range(20):  # every window of the epoch
                next(loader)
    msg = str(err.value)
    assert shard_name(split, 0) in msg and "512" in msg and "vocabulary" in msg
    assert "token id 512" in msg


def test_tokenizer_beside_the_shards_must_be_the_one_that_made_them(tmp_path: Path) -> None:
    from enlace_data.tokenizer import train_tokenizer

    words = (Path(__file__).parent / "sample_es.txt").read_text(encoding="utf-8").split()
    mine = train_tokenizer([" ".join(words[:4000])], vocab_size=400)
    other = train_tokenizer([" ".join(words[4000:8000])], vocab_size=400)
    assert mine.tokenizer_id != other.tokenizer_id
    root = tmp_path / "s"
    ids = np.array(mine.encode(" ".join(words[:600])))
    for s in ("train", "val"):
        write_shard(
            root / shard_name(s, 0),
            ids,
            vocab_size=mine.vocab_size,
            tokenizer_id=mine.tokenizer_id,
            text_bytes=4 * len(ids),
        )
    cfg = DataConfig(kind="shards", path=str(root), context_length=T, eval_batches=1)
    mine.save(root)
    build_loader(cfg, micro_batch_size=2, seed=0)  # the right one: accepted
    other.save(root)  # a tokenizer of another corpus copied over it
    for build in (
        lambda: build_loader(cfg, micro_batch_size=2, seed=0),
        lambda: eval_batches(cfg, micro_batch_size=2),
    ):
        with pytest.raises(DataError) as err:
            build()
        msg = str(err.value)
        assert mine.tokenizer_id in msg and other.tokenizer_id in msg and "tokenizer.model" in msg
    # The manifest records the shards' tokenizer too; one that disagrees is refused as well.
    mine.save(root)
    (root / "manifest.json").write_text(json.dumps({"tokenizer_id": other.tokenizer_id}))
    with pytest.raises(DataError, match=r"manifest\.json"):
        build_loader(cfg, micro_batch_size=2, seed=0)
