"""distributed.py piece by piece, in this process: the launcher environment, the world-size policy,
and DDP/FSDP2 wrapping, gradient sync, clipping and checkpoints on a one-process gloo group."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from enlace_config.schema.model import ModelConfig
from enlace_model import build_model
from enlace_train import checkpointing as C
from enlace_train import distributed as D

CFG = ModelConfig(
    vocab_size=64, context_length=8, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_hidden=64
)
TORCHRUN_ENV = {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}


# ----------------------------------------------------------------------------- the launcher
def test_without_torchrun_it_is_the_single_process_run() -> None:
    assert not D.launched_by_torchrun({})
    info = D.init_distributed("cpu", environ={})
    assert (info.rank, info.world_size, info.distributed, info.is_main) == (0, 1, False, True)
    assert not dist.is_initialized()


def test_torchrun_environment_is_read_without_collectives() -> None:
    info = D.read_env(TORCHRUN_ENV)
    assert (info.rank, info.world_size, info.local_rank, info.local_world_size) == (1, 4, 1, 2)
    assert not info.is_main


@pytest.mark.parametrize(
    "env",
    [
        {**TORCHRUN_ENV, "RANK": "x"},
        {**TORCHRUN_ENV, "RANK": "4"},
        {**TORCHRUN_ENV, "LOCAL_RANK": "2"},
    ],
)
def test_a_broken_launcher_environment_is_refused(env: dict[str, str]) -> None:
    with pytest.raises(D.DistributedError, match="RANK"):
        D.read_env(env)


def test_the_backend_follows_the_hardware_profile() -> None:
    assert D.backend_for("cuda") == "nccl"
    assert D.backend_for("cpu") == "gloo"


def _state(world: int, samples: int = 40) -> dict:
    loader = {"format": 1, "samples_consumed": samples}
    return {
        "rng": {"torch_cpu": torch.get_rng_state()},
        "loader": loader,
        "rank_states": [{"rng": {"rank": r}, "loader": dict(loader)} for r in range(world)],
    }


def test_same_world_size_resumes_each_rank_with_its_own_state() -> None:
    mine, warning = C.rank_resume_state(_state(2), D.DistInfo(rank=1, world_size=2))
    assert mine["rng"] == {"rank": 1} and warning is None


def test_single_process_checkpoints_resume_as_before() -> None:
    state = _state(1)
    del state["rank_states"]
    mine, warning = C.rank_resume_state(state, D.DistInfo())
    assert mine["loader"] is state["loader"] and warning is None


def test_another_world_size_re_splits_the_data_and_says_it_is_not_exact() -> None:
    mine, warning = C.rank_resume_state(_state(2), D.DistInfo(rank=2, world_size=4))
    assert mine["loader"]["samples_consumed"] == 40  # global samples: valid at any world size
    assert warning is not None and "no longer bit-exact" in warning and "written by 2" in warning


def test_disagreeing_loader_states_are_refused_at_another_world_size() -> None:
    state = _state(2)
    state["rank_states"][1]["loader"]["samples_consumed"] = 44
    with pytest.raises(D.DistributedError, match="disagree"):
        C.rank_resume_state(state, D.DistInfo(world_size=1))


# ----------------------------------------------------------------------------- no process group
def test_plain_model_paths_are_the_single_process_ones() -> None:
    model = build_model(CFG)
    info = D.DistInfo()
    assert D.wrap_model(model, "fsdp", info) is model
    assert D.unwrap_model(model) is model and not D.is_sharded(model)
    assert D.transformer_blocks(model) is model.layers
    assert D.reduce_mean([1.5, 2.0], info) == [1.5, 2.0]
    assert D.any_rank(True, info) and not D.any_rank(False, info)
    assert D.gather_objects({"a": 1}, info) == [{"a": 1}]
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    assert D.grad_scaler_for(scaler, model) is scaler


def test_clipping_a_plain_model_is_torch_clip_grad_norm_bit_for_bit() -> None:
    idx = torch.randint(0, CFG.vocab_size, (2, 8))
    grads = []
    for clip in ("ours", "torch"):
        torch.manual_seed(0)
        model = build_model(CFG)
        model(idx, idx).loss.backward()
        with D.gradient_sync(model, enabled=False):  # a no-op for a plain model
            pass
        if clip == "ours":
            norm = D.clip_grad_norm(model, 0.1)
        else:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
        grads.append((norm, [p.grad.clone() for p in model.parameters()]))
    assert torch.equal(grads[0][0], grads[1][0])
    assert all(torch.equal(a, b) for a, b in zip(grads[0][1], grads[1][1], strict=True))


def test_other_ranks_write_no_metrics(tmp_path: Path) -> None:
    writer = D.NullMetricsWriter()
    writer.write({"step": 1})
    writer.close()
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- one-process group
@pytest.fixture
def group() -> Iterator[D.DistInfo]:
    """A real gloo process group of one rank: the wrappers and collectives run for real."""
    if not dist.is_gloo_available():
        pytest.skip("gloo is not available")
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield D.DistInfo(backend="gloo")
    finally:
        dist.destroy_process_group()


def _train_steps(
    model: torch.nn.Module,
    wrapped: torch.nn.Module,
    opt: torch.optim.Optimizer,
    steps: int,
    accum: int = 2,
) -> list[float]:
    gen = torch.Generator().manual_seed(3)
    norms = []
    for _ in range(steps):
        for micro in range(accum):
            idx = torch.randint(0, CFG.vocab_size, (2, 8), generator=gen)
            with D.gradient_sync(wrapped, micro == accum - 1):
                (wrapped(idx, idx).loss / accum).backward()
        norms.append(float(D.clip_grad_norm(model, 0.5)))
        opt.step()
        opt.zero_grad(set_to_none=True)
    return norms


@pytest.mark.parametrize("parallelism", ["ddp", "fsdp"])
def test_wrapped_training_matches_the_plain_model(parallelism: str, group: D.DistInfo) -> None:
    torch.manual_seed(0)
    plain = build_model(CFG)
    plain_opt = torch.optim.AdamW(plain.parameters(), lr=1e-2)
    want = _train_steps(plain, plain, plain_opt, 3)
    torch.manual_seed(0)
    model = build_model(CFG)
    wrapped = D.wrap_model(model, parallelism, group)  # type: ignore[arg-type]
    assert D.is_sharded(model) == (parallelism == "fsdp")
    assert D.unwrap_model(wrapped) is model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    got = _train_steps(model, wrapped, opt, 3)
    assert all(math.isclose(a, b, rel_tol=1e-5) for a, b in zip(got, want, strict=True))
    full = D.consolidated_state_dict(wrapped, group)
    assert full is not None
    for k, v in plain.state_dict().items():
        torch.testing.assert_close(full[k], v, rtol=1e-5, atol=1e-6)


def test_collectives_on_one_rank(group: D.DistInfo) -> None:
    assert D.reduce_mean([1.0, 3.0], group) == [1.0, 3.0]
    assert D.reduce_max([2.0], group) == [2.0]
    assert D.any_rank(True, group) and not D.any_rank(False, group)
    assert D.broadcast_object({"x": 1}, group) == {"x": 1}
    assert D.gather_objects({"t": torch.ones(2)}, group)[0]["t"].tolist() == [1.0, 1.0]
    D.barrier(group)


def test_sharded_checkpoint_round_trip_and_consolidated_weights(
    group: D.DistInfo, tmp_path: Path
) -> None:
    from enlace_config import load_run_config
    from enlace_data.loader import build_loader
    from enlace_model import load_model
    from enlace_model.checkpoint import list_checkpoints
    from enlace_train.backends import setup_backend

    resolved = load_run_config(_tiny_run_file(tmp_path))
    cfg = resolved.config
    torch.manual_seed(0)
    model = build_model(cfg.model)
    D.wrap_model(model, "fsdp", group)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    _train_steps(model, model, opt, 2)
    loader = build_loader(cfg.data, micro_batch_size=2, seed=0)
    backend = setup_backend(cfg.hardware)
    progress = C.TrainProgress(step=2)
    training = C.Training(model, opt, backend.grad_scaler(), loader, backend, group, progress)
    path = C.save(training, resolved)  # the one save of one process or many
    assert list_checkpoints(cfg.run.out_dir) == [path] and C.has_sharded_state(path)
    saved = torch.load(path / "trainer_state.pt", weights_only=True)
    assert saved["optimizer"] is None and saved["parallelism"] == "fsdp"
    (only,) = saved["rank_states"]
    assert only["loader"] == loader.state_dict()
    assert torch.equal(only["rng"]["torch_cpu"], saved["rng"]["torch_cpu"])
    # the consolidated weights read like any checkpoint's
    loaded = load_model(path)
    full = D.consolidated_state_dict(model, group)
    assert full is not None
    for k, v in loaded.state_dict().items():
        assert torch.equal(v, full[k])
    # a fresh sharded model + optimizer get the same weights and moments back
    torch.manual_seed(1)
    other = build_model(cfg.model)
    D.wrap_model(other, "fsdp", group)
    other_opt = torch.optim.AdamW(other.parameters(), lr=1e-2)
    C.load_sharded(path, other, other_opt)
    after = D.consolidated_state_dict(other, group)
    assert after is not None and all(torch.equal(after[k], full[k]) for k in full)
    assert _train_steps(other, other, other_opt, 1) == _train_steps(model, model, opt, 1)


def test_a_non_sharded_checkpoint_is_refused_by_an_fsdp_job(
    group: D.DistInfo, tmp_path: Path
) -> None:
    model = build_model(CFG)
    D.wrap_model(model, "fsdp", group)
    opt = torch.optim.AdamW(model.parameters())
    with pytest.raises(D.DistributedError, match="written by a single-process or DDP run"):
        C.load_sharded(tmp_path, model, opt)
    with pytest.raises(D.DistributedError, match=r"train\.init_optimizer"):
        D.refuse_sharded(model, "train.init_optimizer")


@pytest.mark.filterwarnings("ignore:Found a non-scalar tensor:UserWarning")  # torch's own scaler
def test_fsdp_with_loss_scaling_gets_a_sharded_grad_scaler(group: D.DistInfo) -> None:
    """Every rank must take the same skip decision, so the inf/nan check is all-reduced."""
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    model = build_model(CFG)
    D.wrap_model(model, "fsdp", group)
    plain = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=7)
    scaler = D.grad_scaler_for(plain, model)
    assert isinstance(scaler, ShardedGradScaler)
    assert scaler.get_scale() == 1024.0 and scaler.get_growth_interval() == 7
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    before = {k: v.clone() for k, v in D.consolidated_state_dict(model, group).items()}  # type: ignore[union-attr]
    idx = torch.randint(0, CFG.vocab_size, (2, 8))
    scaler.scale(model(idx, idx).loss * float("inf")).backward()
    scaler.step(opt)  # an inf gradient: the step is skipped and the scale backs off
    scaler.update()
    assert scaler.get_scale() == 512.0
    after = D.consolidated_state_dict(model, group)
    assert after is not None and all(torch.equal(after[k], before[k]) for k in before)


def test_accumulation_micro_steps_skip_the_gradient_reduction(group: D.DistInfo) -> None:
    idx = torch.randint(0, CFG.vocab_size, (2, 8))
    ddp = D.wrap_model(build_model(CFG), "ddp", group)
    with D.gradient_sync(ddp, enabled=False):
        assert not ddp.require_backward_grad_sync  # DDP's no_sync
    assert ddp.require_backward_grad_sync

    model = build_model(CFG)
    D.wrap_model(model, "fsdp", group)
    with D.gradient_sync(model, enabled=False):
        model(idx, idx).loss.backward()
    # FSDP2 keeps the unreduced gradients aside: no sharded .grad exists before the last micro-step
    assert all(p.grad is None for p in model.parameters())
    with D.gradient_sync(model, enabled=True):
        model(idx, idx).loss.backward()
    assert all(p.grad is not None for p in model.parameters())


# ----------------------------------------------------------------------------- trainer start-up
def _tiny_run_file(tmp_path: Path) -> Path:
    import json

    cfg = {
        "run": {"name": "order", "out_dir": str(tmp_path / "run")},
        "hardware": {"device": "cpu", "micro_batch_size": 2, "num_threads": 1},
        "model": CFG.model_dump(),
        "train": {"max_steps": 1, "global_batch_size": 2, "lr": 1e-3, "log_every": 1},
        "data": {
            "kind": "bytes",
            "path": str(tmp_path / "none"),
            "fallback": "builtin",
            "context_length": 8,
            "eval_batches": 1,
        },
    }
    cfg["model"]["vocab_size"] = 256
    path = tmp_path / "order.yaml"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    return path


@pytest.mark.parametrize("hardware_ok", [True, False])
def test_every_rank_checks_its_hardware_before_joining_the_group(
    hardware_ok: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bad profile must fail on each rank before any collective, or the peers would wait."""
    from enlace_config import load_run_config
    from enlace_train import trainer
    from enlace_train.errors import HardwareError

    calls: list[str] = []
    real_backend, real_init = trainer.setup_backend, D.init_distributed

    def backend(hw):  # type: ignore[no-untyped-def]
        calls.append("hardware check")
        if not hardware_ok:
            raise HardwareError("simulated: this board cannot run the profile")
        return real_backend(hw)

    def init(device, **kw):  # type: ignore[no-untyped-def]
        calls.append("process group")
        return real_init(device, environ={})

    monkeypatch.setattr(trainer, "setup_backend", backend)
    monkeypatch.setattr(D, "init_distributed", init)
    resolved = load_run_config(_tiny_run_file(tmp_path))
    if hardware_ok:
        trainer.train(resolved)
        assert calls == ["hardware check", "process group"]
    else:
        with pytest.raises(HardwareError):
            trainer.train(resolved)
        assert calls == ["hardware check"]


def test_full_weights_load_into_a_sharded_model(group: D.DistInfo) -> None:
    """train.init_from under FSDP: a single-process checkpoint's full weights, sharded on load."""
    torch.manual_seed(5)
    source = build_model(CFG).state_dict()
    torch.manual_seed(6)
    model = build_model(CFG)
    D.wrap_model(model, "fsdp", group)
    D.load_full_weights(model, source)
    full = D.consolidated_state_dict(model, group)
    assert full is not None and all(torch.equal(full[k], v) for k, v in source.items())
    plain = build_model(CFG)
    D.load_full_weights(plain, source)
    assert all(torch.equal(plain.state_dict()[k], v) for k, v in source.items())
