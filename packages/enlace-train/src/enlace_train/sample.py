"""`enlace-train sample RUN_DIR --prompt "..."`: continue a prompt with a run's newest checkpoint.

The model is loaded by enlace_model (safetensors, never pickle) and the tokenizer by enlace_data from
the same directory (a run's newest intact checkpoint, a checkpoint or an exported folder), so this
is exactly what another project importing enlace_model sees.
"""

from __future__ import annotations

import torch
from enlace_data import load_tokenizer
from enlace_model import generate
from enlace_model.checkpoint import load_model, resolve_checkpoint


def sample_text(
    path: str,
    prompt: str,
    *,
    max_new_tokens: int = 200,
    temperature: float = 0.8,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = 1337,
) -> str:
    """The prompt followed by the model's continuation, decoded to text."""
    checkpoint = resolve_checkpoint(path)
    model = load_model(checkpoint, device="cpu", dtype=torch.float32)
    tokenizer = load_tokenizer(checkpoint)
    ids = tokenizer.encode(prompt)
    if not ids:
        raise ValueError("the prompt is empty: give --prompt some text to continue")
    # Past the model's context, generate slides its window (the last half context is re-read).
    new = generate(
        model,
        [ids],
        max_new_tokens,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
    )[0]
    return prompt + tokenizer.decode(new)
