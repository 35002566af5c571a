"""Fixtures of the trainer's tests: seeds and default dtype reset for every test, tiny configs."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch


@pytest.fixture(autouse=True)
def _reset_torch_state():
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    torch.set_default_dtype(torch.float32)
    threads = torch.get_num_threads()
    yield
    torch.set_default_dtype(torch.float32)
    torch.set_num_threads(threads)
