"""`enlace-train sample RUN_DIR --prompt "..."`: continue a prompt with a run's newest checkpoint.

The model is loaded by enlace_model (safetensors, never pickle) and the tokenizer by enlace_data from
the same checkpoint directory, so this is exactly what another project importing enlace_model sees.
"""

from __future__ import annotations

import torch
from enlace_data.tokenizer import load_tokenizer
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
    context = model.cfg.context_length
    # Longer than one context: slide a window. Each chunk starts from the last half context of
    # what exists so far (the KV cache holds one context), with its own derived seed.
    window = ids[-(context // 2) :] if len(ids) > context // 2 else ids
    new: list[int] = []
    chunk = 0
    while len(new) < max_new_tokens:
        n = min(max_new_tokens - len(new), context - len(window))
        out = generate(
            model,
            [window],
            n,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            seed=None if seed is None else seed + chunk,
        )[0]
        if not out:
            break
        new += out
        window = (window + out)[-(context // 2) :]
        chunk += 1
    return prompt + tokenizer.decode(new)
