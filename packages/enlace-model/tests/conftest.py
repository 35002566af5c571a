"""Fixtures for enlace-model's tests: a fixed seed and float32 default dtype around every test, and
tiny configs (2 layers, width 32) so every test runs in milliseconds."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

import pytest
import torch
from enlace_config.schema.model import ModelConfig


@pytest.fixture(autouse=True, scope="session")
def _one_thread() -> Iterator[None]:
    """Tiny shapes gain nothing from threads, and the 2 cores are shared: one intra-op thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _reset_torch() -> Iterator[None]:
    torch.manual_seed(0)
    random.seed(0)
    torch.set_default_dtype(torch.float32)
    yield
    torch.set_default_dtype(torch.float32)


def _tiny_config(**overrides: object) -> ModelConfig:
    base: dict[str, object] = {
        "vocab_size": 64,
        "context_length": 64,
        "d_model": 32,
        "n_layers": 2,
        "n_heads": 4,
        "n_kv_heads": 2,
        "ffn_hidden": 64,
    }
    return ModelConfig.model_validate(base | overrides)


@pytest.fixture
def tiny_config() -> Callable[..., ModelConfig]:
    """tiny_config(**overrides) → a ModelConfig of 2 layers, width 32, GQA 4/2, vocab 64."""
    return _tiny_config


@pytest.fixture
def cfg() -> ModelConfig:
    return _tiny_config()


@pytest.fixture
def perturb_norms() -> Callable[..., None]:
    return _perturb_norms


def _perturb_norms(model: torch.nn.Module, std: float = 0.3) -> None:
    """Norm weights start at 1; spread them so a test sees whether each one is applied."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(1.0, std)
