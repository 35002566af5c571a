"""backends.py against simulated boards: what torch reports is substituted (the few torch.cuda
and torch.cpu functions backends.py calls), everything else is real."""

from __future__ import annotations

import pytest
import torch
from enlace_config.schema import HardwareConfig
from enlace_train import backends
from enlace_train.backends import setup_backend
from enlace_train.errors import HardwareError

BOARDS = {
    # name: (device name, compute capability, bf16 in silicon)
    "turing": ("NVIDIA GeForce RTX 2060", (7, 5), False),
    "ampere": ("NVIDIA A100-SXM4-40GB", (8, 0), True),
    "hopper": ("NVIDIA H100 80GB HBM3", (9, 0), True),
    "blackwell": ("NVIDIA GeForce RTX 5090", (12, 0), True),
}


def simulate_gpu(monkeypatch: pytest.MonkeyPatch, board: str, *, bf16_arg: bool = True) -> None:
    name, cap, bf16 = BOARDS[board]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: cap)
    if bf16_arg:

        def is_bf16_supported(including_emulation: bool = True) -> bool:
            return bf16 or including_emulation  # torch emulates bf16 on older boards

    else:  # a torch from before `including_emulation` existed

        def is_bf16_supported() -> bool:  # type: ignore[misc]
            return True  # would lie about emulation: backends must use the capability instead

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", is_bf16_supported)
    monkeypatch.setattr(backends, "_has_triton", lambda: True)


def simulate_cpu(monkeypatch: pytest.MonkeyPatch, *, avx512_bf16: bool, amx: bool) -> None:
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)


def simulate_no_cuda(monkeypatch: pytest.MonkeyPatch, message: str) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)

    def init() -> None:
        raise RuntimeError(message)

    monkeypatch.setattr(torch.cuda, "init", init)


def hw(**kw: object) -> HardwareConfig:
    base: dict[str, object] = {"name": "test-profile", "device": "cuda", "micro_batch_size": 4}
    base.update(kw)
    return HardwareConfig.model_validate(base)


def refused(profile: HardwareConfig) -> str:
    with pytest.raises(HardwareError) as info:
        setup_backend(profile)
    return str(info.value)


BF16_FLASH = {"dtype": "bfloat16", "attention": "flash"}
FP16 = {"dtype": "float16", "loss_scaling": True, "attention": "mem_efficient"}


@pytest.mark.parametrize("board", ["ampere", "hopper", "blackwell"])
def test_sm80_plus_accepts_bf16_flash_and_compile(monkeypatch, board):
    simulate_gpu(monkeypatch, board)
    backend = setup_backend(hw(**BF16_FLASH, compile=True))
    assert backend.board.name == BOARDS[board][0]
    assert backend.autocast_dtype is torch.bfloat16
    assert backend.fused_adamw


def test_turing_accepts_fp16_with_grad_scaler(monkeypatch):
    simulate_gpu(monkeypatch, "turing")
    backend = setup_backend(hw(**FP16))
    assert backend.autocast_dtype is torch.float16
    assert backend.hw.loss_scaling


@pytest.mark.parametrize("bf16_arg", [True, False])
def test_turing_refuses_bf16_naming_profile_board_capability_and_alternative(monkeypatch, bf16_arg):
    simulate_gpu(monkeypatch, "turing", bf16_arg=bf16_arg)
    msg = refused(hw(dtype="bfloat16", attention="mem_efficient"))
    assert "test-profile" in msg
    assert "RTX 2060" in msg
    assert "7.5" in msg and "sm_75" in msg
    assert "bfloat16" in msg
    assert "turing-2060.yaml" in msg


def test_turing_refuses_flash_and_lists_every_problem(monkeypatch):
    simulate_gpu(monkeypatch, "turing")
    msg = refused(hw(**BF16_FLASH))
    assert "(1)" in msg and "(2)" in msg
    assert "flash" in msg and "sm_80" in msg


@pytest.mark.parametrize("board", ["ampere", "blackwell"])
def test_flash_in_float32_refused_on_cuda(monkeypatch, board):
    simulate_gpu(monkeypatch, board)
    msg = refused(hw(dtype="float32", attention="flash"))
    assert "float32" in msg and "flash" in msg
    assert BOARDS[board][0] in msg
    assert "blackwell-5090.yaml" in msg


def test_compile_needs_triton_on_cuda(monkeypatch):
    simulate_gpu(monkeypatch, "hopper")
    monkeypatch.setattr(backends, "_has_triton", lambda: False)
    assert "Triton" in refused(hw(**BF16_FLASH, compile=True))


def test_cuda_on_cpu_only_machine(monkeypatch):
    simulate_no_cuda(monkeypatch, "Found no NVIDIA driver on your system.")
    msg = refused(hw(**FP16))
    assert "CPU-only" in msg and "test-profile" in msg and "cpu.yaml" in msg
    assert "driver is too old" not in msg


def test_cuda_with_too_old_driver_is_told_apart(monkeypatch):
    simulate_no_cuda(
        monkeypatch,
        "The NVIDIA driver on your system is too old (found version 11040). Please update your "
        "GPU driver.",
    )
    msg = refused(hw(**FP16))
    assert "driver is too old" in msg and "11040" in msg and "update the driver" in msg
    assert "CPU-only" not in msg


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize(("avx512_bf16", "amx"), [(True, False), (False, True)])
def test_a_cpu_with_bfloat16_instructions_allows_every_dtype(monkeypatch, dtype, avx512_bf16, amx):
    simulate_cpu(monkeypatch, avx512_bf16=avx512_bf16, amx=amx)
    profile = HardwareConfig.model_validate(
        {"device": "cpu", "dtype": dtype, "loss_scaling": dtype == "float16", "micro_batch_size": 2}
    )
    backend = setup_backend(profile)
    assert "with bfloat16 instructions" in backend.board.describe()
    assert backend.board.device == "cpu"
    assert backend.grad_scaler().is_enabled() == (dtype == "float16")
    with backend.autocast():
        out = torch.ones(2, 2) @ torch.ones(2, 2)
    assert out.dtype == (backend.autocast_dtype or torch.float32)


def test_bfloat16_on_a_cpu_without_its_instructions_is_refused_naming_float32(monkeypatch):
    simulate_cpu(monkeypatch, avx512_bf16=False, amx=False)
    profile = HardwareConfig.model_validate(
        {"device": "cpu", "dtype": "bfloat16", "micro_batch_size": 2}
    )
    message = refused(profile)
    assert "hardware.dtype=bfloat16" in message and "no bfloat16 instructions" in message
    assert "hardware.dtype=float32" in message and "--float32" in message
    assert "without bfloat16 instructions" in message  # the board, as described
    for dtype in ("float32", "float16"):  # float16 still runs, to exercise the 2060's path
        setup_backend(profile.model_copy(update={"dtype": dtype, "loss_scaling": True}))


def test_a_torch_without_the_cpu_probes_is_not_assumed_to_have_bfloat16(monkeypatch):
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported")
    assert backends._cpu_board().bf16_native is False  # pyright: ignore[reportPrivateUsage]


def test_cpu_compile_needs_a_cxx_compiler(monkeypatch, tmp_path):
    profile = HardwareConfig.model_validate(
        {"device": "cpu", "compile": True, "micro_batch_size": 2}
    )
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty PATH: no g++, c++ or clang++
    msg = refused(profile)
    assert "C++ compiler" in msg and "cpu.yaml" in msg


def test_num_threads_applied():
    setup_backend(
        HardwareConfig.model_validate({"device": "cpu", "num_threads": 1, "micro_batch_size": 2})
    )
    assert torch.get_num_threads() == 1


def test_profile_for_another_board_is_refused_naming_the_override(monkeypatch):
    simulate_gpu(monkeypatch, "hopper")
    message = refused(hw(**FP16, compute_capability=[7, 5]))
    assert "hardware.compute_capability=7.5" in message
    assert "NVIDIA H100 80GB HBM3, compute capability 9.0 (sm_90)" in message
    assert "hardware.allow_other_board=true" in message


def test_allow_other_board_runs_the_profile_and_keeps_the_other_checks(monkeypatch):
    simulate_gpu(monkeypatch, "hopper")
    backend = setup_backend(hw(**FP16, compute_capability=[7, 5], allow_other_board=True))
    assert backend.autocast_dtype is torch.float16
    simulate_gpu(monkeypatch, "turing")
    message = refused(hw(**BF16_FLASH, compute_capability=[12, 0], allow_other_board=True))
    assert "no bfloat16 in silicon" in message and "compute_capability" not in message


@pytest.mark.parametrize("board", ["turing", "blackwell"])
def test_the_shipped_profiles_fit_their_own_board(monkeypatch, board):
    from enlace_config import load_run_config

    simulate_gpu(monkeypatch, board)
    run = {"turing": "configs/runs/smoke-2060.yaml", "blackwell": "configs/runs/smoke-5090.yaml"}
    setup_backend(load_run_config(run[board], []).config.hardware)
