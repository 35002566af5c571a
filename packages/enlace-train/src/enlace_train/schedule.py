"""The warmup-stable-decay (WSD) learning-rate schedule, a pure function of the step.

Being a function of the step alone, the schedule needs no state of its own in a checkpoint beyond the
step, and a longer `train.max_steps` on resume simply lengthens the plateau (the decay phase moves to
the new end), which is how a WSD run is extended.
"""

import math

from enlace_config.schema import TrainConfig


def lr_at(step: int, cfg: TrainConfig, max_steps: int | None = None) -> float:
    """Learning rate for optimizer step `step` (0-based: the first update is step 0).

    warmup: lr * (step + 1) / warmup_steps for step < warmup_steps (never 0, the first update counts);
    stable: lr;
    decay:  over the last decay_steps steps, from lr to min_lr with progress p = (step - start + 1) /
            decay_steps in (0, 1], so the last step runs at exactly min_lr:
            linear  lr + (min_lr - lr) * p
            cosine  min_lr + (lr - min_lr) * (1 + cos(pi p)) / 2
            1-sqrt  min_lr + (lr - min_lr) * (1 - sqrt(p))
    """
    total = cfg.max_steps if max_steps is None else max_steps
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    decay_start = total - cfg.decay_steps
    if cfg.decay_steps == 0 or step < decay_start:
        return cfg.lr
    p = min(1.0, (step - decay_start + 1) / cfg.decay_steps)
    if cfg.decay_shape == "linear":
        return cfg.lr + (cfg.min_lr - cfg.lr) * p
    if cfg.decay_shape == "cosine":
        return cfg.min_lr + (cfg.lr - cfg.min_lr) * 0.5 * (1.0 + math.cos(math.pi * p))
    return cfg.min_lr + (cfg.lr - cfg.min_lr) * (1.0 - math.sqrt(p))
