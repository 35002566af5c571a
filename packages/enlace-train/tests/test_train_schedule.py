"""The WSD schedule, checked point by point against values computed by hand."""

from __future__ import annotations

import math

import pytest
from enlace_config.schema import TrainConfig
from enlace_train.schedule import lr_at


def cfg(**kw: object) -> TrainConfig:
    base: dict[str, object] = {"max_steps": 10, "global_batch_size": 4, "lr": 1.0, "min_lr": 0.1}
    base.update(kw)
    return TrainConfig.model_validate(base)


def curve(c: TrainConfig) -> list[float]:
    return [lr_at(s, c) for s in range(c.max_steps)]


def test_linear_wsd_curve_exact():
    c = cfg(warmup_steps=2, decay_steps=4, decay_shape="linear")
    # steps 0-1 warmup, 2-5 plateau, 6-9 decay ending exactly at min_lr
    expected = [0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 0.775, 0.55, 0.325, 0.1]
    assert curve(c) == pytest.approx(expected, abs=1e-12)


def test_cosine_decay_curve_exact():
    c = cfg(warmup_steps=0, decay_steps=4, decay_shape="cosine")
    decay = [0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * k / 4)) for k in (1, 2, 3, 4)]
    assert curve(c) == pytest.approx([1.0] * 6 + decay, abs=1e-12)
    assert curve(c)[-1] == pytest.approx(0.1)


def test_one_minus_sqrt_decay_curve_exact():
    c = cfg(warmup_steps=1, decay_steps=4, decay_shape="1-sqrt")
    decay = [0.1 + 0.9 * (1 - math.sqrt(k / 4)) for k in (1, 2, 3, 4)]
    assert curve(c) == pytest.approx([1.0] * 6 + decay, abs=1e-12)


def test_no_decay_stays_on_plateau_and_warmup_is_linear():
    c = cfg(warmup_steps=4, decay_steps=0)
    assert curve(c) == pytest.approx([0.25, 0.5, 0.75] + [1.0] * 7)


def test_longer_max_steps_moves_the_decay_to_the_new_end():
    c = cfg(warmup_steps=2, decay_steps=4)
    assert lr_at(6, c) < 1.0
    assert lr_at(6, c, max_steps=20) == 1.0
    assert lr_at(19, c, max_steps=20) == pytest.approx(0.1)
