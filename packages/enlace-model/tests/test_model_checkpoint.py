"""The checkpoint layout: atomic writes, the COMPLETE marker, finding the newest intact checkpoint,
exact save → load, dtype/attention chosen at load, and clear failures for tampered, mismatched,
incomplete or non-safetensors checkpoints."""

from __future__ import annotations

import json
import os
import pickle
import warnings
from pathlib import Path

import pytest
import torch
from enlace_model import (
    TRAINER_STATE_FILE,
    CheckpointError,
    atomic_checkpoint,
    build_model,
    find_latest_checkpoint,
    list_checkpoints,
    load_model,
    resolve_checkpoint,
    save_model,
)
from enlace_model.checkpoint import (
    COMPLETE_FILE,
    read_model_config,
    verify_checkpoint,
)


def write_checkpoint(run_dir, step, model, cfg, trainer_state=None):
    with atomic_checkpoint(run_dir, step) as d:
        save_model(d, model, cfg)
        if trainer_state is not None:
            torch.save(trainer_state, d / TRAINER_STATE_FILE)
    return Path(run_dir) / "checkpoints" / f"step_{step}"


@pytest.mark.parametrize("tie", [True, False])
def test_save_load_round_trip_is_exact(tmp_path, tiny_config, perturb_norms, tie):
    cfg = tiny_config(tie_embeddings=tie)
    model = build_model(cfg)
    perturb_norms(model)
    ckpt = write_checkpoint(tmp_path, 7, model, cfg)
    loaded = load_model(tmp_path)  # a run directory
    assert not loaded.training
    assert loaded.cfg == cfg
    want, got = model.state_dict(), loaded.state_dict()
    assert list(want) == list(got)
    for k in want:
        assert torch.equal(want[k], got[k]), k
    idx = torch.randint(0, cfg.vocab_size, (2, 9))
    assert torch.equal(model(idx).logits, loaded(idx).logits)
    assert torch.equal(load_model(ckpt)(idx).logits, model(idx).logits)  # a checkpoint directory
    meta = json.loads((ckpt / "model.json").read_text())
    assert meta["format"] == "enlace-checkpoint" and meta["format_version"] == 1
    assert meta["config"]["d_model"] == cfg.d_model


def test_dtype_and_attention_are_chosen_at_load(tmp_path, cfg):
    model = build_model(cfg)
    write_checkpoint(tmp_path, 1, model, cfg)
    loaded = load_model(tmp_path, dtype="bfloat16", attention="math")
    assert loaded.embed.weight.dtype == torch.bfloat16
    assert loaded.attention == "math"
    assert loaded.rope_cos.dtype == torch.bfloat16
    idx = torch.randint(0, cfg.vocab_size, (1, 6))
    torch.testing.assert_close(loaded(idx).logits.float(), model(idx).logits, rtol=0.05, atol=0.05)
    f64 = load_model(tmp_path, dtype=torch.float64, attention="flash")
    torch.testing.assert_close(f64(idx).logits.float(), model(idx).logits, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="unknown dtype"):
        load_model(tmp_path, dtype="float8")


def test_atomic_checkpoint_writes_marker_with_every_hash(tmp_path, cfg):
    model = build_model(cfg)
    ckpt = write_checkpoint(tmp_path, 3, model, cfg, trainer_state={"step": torch.tensor(3)})
    marker = json.loads((ckpt / COMPLETE_FILE).read_text())
    assert marker["step"] == 3
    assert set(marker["files"]) == {"model.safetensors", "model.json", TRAINER_STATE_FILE}
    for name, entry in marker["files"].items():
        assert entry["bytes"] == (ckpt / name).stat().st_size
        assert len(entry["sha256"]) == 64
    verify_checkpoint(ckpt)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_3"]
    state = torch.load(ckpt / TRAINER_STATE_FILE, weights_only=True)
    assert int(state["step"]) == 3


def test_atomic_checkpoint_leaves_nothing_on_error(tmp_path, cfg):
    model = build_model(cfg)
    with pytest.raises(RuntimeError, match="disk full"), atomic_checkpoint(tmp_path, 5) as d:
        save_model(d, model, cfg)
        raise RuntimeError("disk full")
    assert list((tmp_path / "checkpoints").iterdir()) == []
    assert find_latest_checkpoint(tmp_path) is None


def test_saving_the_same_step_again_replaces_it(tmp_path, tiny_config):
    cfg = tiny_config()
    write_checkpoint(tmp_path, 2, build_model(cfg), cfg)
    second = build_model(cfg)
    ckpt = write_checkpoint(tmp_path, 2, second, cfg)
    assert torch.equal(load_model(ckpt).embed.weight, second.embed.weight)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_2"]


def test_stale_temporary_of_a_dead_process_is_removed(tmp_path, cfg):
    stale = tmp_path / "checkpoints" / ".tmp-step_9-999999999"
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"half written")
    write_checkpoint(tmp_path, 10, build_model(cfg), cfg)
    assert not stale.exists()


def test_latest_skips_incomplete_and_corrupt_with_a_warning(tmp_path, cfg):
    model = build_model(cfg)
    for step in (100, 200, 300, 400):
        write_checkpoint(tmp_path, step, model, cfg, trainer_state={"x": torch.zeros(3)})
    root = tmp_path / "checkpoints"
    (root / "step_400" / COMPLETE_FILE).unlink()  # interrupted before the marker
    with open(root / "step_300" / TRAINER_STATE_FILE, "r+b") as f:  # bit rot
        f.seek(10)
        f.write(b"\x00\xff")
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_100", "step_200", "step_300"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        latest = find_latest_checkpoint(tmp_path)
    assert latest == root / "step_200"
    messages = " | ".join(str(w.message) for w in caught)
    assert "step_400" in messages and "incomplete" in messages
    assert "step_300" in messages and "checksum mismatch" in messages
    with pytest.warns(UserWarning, match="skipping checkpoint"):
        assert resolve_checkpoint(tmp_path) == root / "step_200"


def test_tampered_weights_fail_clearly(tmp_path, cfg):
    ckpt = write_checkpoint(tmp_path, 1, build_model(cfg), cfg)
    weights = ckpt / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0x01  # one flipped bit in a tensor
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: checksum mismatch"):
        load_model(ckpt)
    with pytest.raises(CheckpointError, match="no complete checkpoint"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        load_model(tmp_path)


def test_incomplete_step_directory_is_refused(tmp_path, cfg):
    ckpt = write_checkpoint(tmp_path, 1, build_model(cfg), cfg)
    (ckpt / COMPLETE_FILE).unlink()
    with pytest.raises(CheckpointError, match="incomplete checkpoint"):
        load_model(ckpt)


@pytest.mark.parametrize(
    ("change", "tensor", "detail"),
    [
        ({"d_model": 64, "ffn_hidden": 64}, "'embed.weight'", r"shape \(64, 32\) in the file"),
        ({"n_layers": 3}, "'layers.2.attn_norm.weight'", "missing from the file"),
        ({"qk_norm": False}, "'layers.0.attn.q_norm.weight'", "not in a model of this config"),
        ({"tie_embeddings": False}, "'lm_head.weight'", "missing"),
    ],
)
def test_weights_not_matching_config_name_first_tensor(tmp_path, cfg, change, tensor, detail):
    model = build_model(cfg)
    d = tmp_path / "plain"
    save_model(d, model, cfg)  # a directory written by save_model alone loads too
    assert torch.equal(load_model(d).embed.weight, model.embed.weight)
    meta = json.loads((d / "model.json").read_text())
    meta["config"] |= change
    (d / "model.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="first mismatched tensor") as err:
        load_model(d)
    assert tensor in str(err.value)
    assert err.match(detail)


def test_pickles_are_never_loaded(tmp_path, cfg):
    d = tmp_path / "evil"
    save_model(d, build_model(cfg), cfg)

    class Boom:
        def __reduce__(self):
            return (os.system, ("echo pwned > " + str(tmp_path / "pwned"),))

    (d / "model.safetensors").write_bytes(pickle.dumps({"embed.weight": Boom()}))
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        load_model(d)
    assert not (tmp_path / "pwned").exists()


def test_bad_paths_and_configs(tmp_path, cfg):
    with pytest.raises(CheckpointError, match="no such file"):
        load_model(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="neither a run directory"):
        resolve_checkpoint(tmp_path / "empty")
    d = tmp_path / "m"
    save_model(d, build_model(cfg), cfg)
    meta = json.loads((d / "model.json").read_text())
    meta["config"]["n_heads"] = 5
    (d / "model.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="invalid model config"):
        read_model_config(d)
    meta["format_version"] = 99
    (d / "model.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="format version 99"):
        read_model_config(d)


def test_own_safetensors_writer_round_trips_every_dtype(tmp_path):
    """enlace-model writes safetensors itself (safetensors' torch writer needs numpy)."""
    from enlace_model.checkpoint import write_safetensors
    from safetensors import safe_open
    from safetensors.torch import load_file

    tensors = {
        "f32": torch.randn(3, 5),
        "bf16": torch.randn(4, 2).to(torch.bfloat16),
        "f16": torch.randn(7).to(torch.float16),
        "f64": torch.randn(2, 2, 2, dtype=torch.float64),
        "i64": torch.arange(5),
        "flag": torch.tensor([True, False, True]),
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 4),
        "strided": torch.randn(6, 4).t(),  # not contiguous: written contiguous
    }
    path = tmp_path / "t.safetensors"
    write_safetensors(path, tensors, {"format": "pt"})
    back = load_file(str(path))
    assert list(back) == list(tensors)
    for name, t in tensors.items():
        assert back[name].dtype == t.dtype and torch.equal(back[name], t), name
    with safe_open(str(path), framework="pt") as f:
        assert f.metadata() == {"format": "pt"}
