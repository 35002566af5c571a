"""backends.py on a real CUDA board (`-m gpu`; scripts/gpu-check.sh runs these on a lent GPU).

The simulated-board tests (test_train_backends.py) prove the rules; these prove that torch on real
silicon reports what those rules read, and that the user sees the refusal they describe.
"""

from __future__ import annotations

import pytest
import torch
from enlace_config import load_run_config
from enlace_train.backends import detect_cuda_board, setup_backend
from enlace_train.errors import HardwareError

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_bf16_in_silicon_is_read_without_emulation():
    board = detect_cuda_board()
    assert board.capability is not None
    assert board.bf16_native == torch.cuda.is_bf16_supported(including_emulation=False)
    assert board.bf16_native == (board.capability >= (8, 0))


@pytest.mark.parametrize(
    ("run", "capability"),
    [("configs/runs/smoke-2060.yaml", (7, 5)), ("configs/runs/smoke-5090.yaml", (12, 0))],
)
def test_a_profile_for_another_board_is_refused_with_the_users_message(run, capability):
    board = detect_cuda_board()
    hw = load_run_config(run, []).config.hardware
    if board.capability == capability:
        pytest.skip(f"this board is the profile's own ({board.describe()})")
    with pytest.raises(HardwareError) as info:
        setup_backend(hw)
    message = str(info.value)
    assert f"hardware.compute_capability={capability[0]}.{capability[1]}" in message
    assert board.describe() in message and "hardware.allow_other_board=true" in message
    allowed = load_run_config(run, ["hardware.allow_other_board=true"]).config.hardware
    if hw.dtype == "bfloat16" and not board.bf16_native:
        return  # refused for bfloat16 as well: test_train_backends covers that message
    assert setup_backend(allowed).board == board


def test_float16_grad_scaler_steps_on_the_gpu():
    hw = load_run_config("configs/runs/smoke-2060.yaml", ["hardware.allow_other_board=true"])
    backend = setup_backend(hw.config.hardware)
    layer = torch.nn.Linear(64, 64).cuda()
    optimizer = torch.optim.AdamW(layer.parameters(), lr=1e-3, fused=backend.fused_adamw)
    scaler = backend.grad_scaler()
    before = layer.weight.detach().clone()
    with backend.autocast():
        out = layer(torch.randn(8, 64, device="cuda"))
    assert out.dtype is torch.float16
    scaler.scale(out.float().pow(2).mean()).backward()
    scaler.step(optimizer)
    scaler.update()
    assert scaler.get_scale() == hw.config.hardware.grad_scaler_init_scale
    assert not torch.equal(before, layer.weight)
