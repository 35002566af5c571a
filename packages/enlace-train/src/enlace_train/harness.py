"""`enlace-train lm-eval MODEL [--tasks ...]`: Spanish benchmarks through EleutherAI's lm-eval.

The model is scored as the world sees it: its Hugging Face export (a run or checkpoint is exported
to a temporary folder first), loaded by lm-eval's `hf` model. The default tasks are lm-eval's
Spanish multiple-choice ones, scored by log-likelihood, so a small base model gets a meaningful
figure. Their data comes from the Hub. `--include DIR` adds local task YAML files (the tests run
a tiny local task this way). lm-eval is the optional extra `enlace-train[lm-eval]`, imported here.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SPANISH_TASKS = ("xnli_es", "xstorycloze_es", "paws_es", "copa_es", "belebele_spa_Latn",
                 "openbookqa_es", "wnli_es")  # fmt: skip


def _export(model: str, tmp: str) -> Path:
    """`model` itself when it is a Hugging Face folder, else its export into `tmp`."""
    from enlace_model.checkpoint import resolve_checkpoint
    from enlace_model.export import export_hf

    path = Path(model)
    if (path / "config.json").is_file() and not (path / "model.json").is_file():
        return path
    return export_hf(resolve_checkpoint(path), Path(tmp) / "export")


def _prefix_token(folder: Path) -> int | None:
    """The token lm-eval puts before an empty context. SentencePiece exports have <|endoftext|>
    as bos/eos and lm-eval finds it; a byte-level export has no special token at all, so the
    newline byte (a paragraph boundary in the byte-level training text) stands in."""
    import json

    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    if config.get("bos_token_id") is None and config.get("eos_token_id") is None:
        return ord("\n")
    return None


def run_lm_eval(
    model: str,
    tasks: Sequence[str] = SPANISH_TASKS,
    *,
    include: str | None = None,
    device: str = "cuda",
    dtype: str = "bfloat16",
    batch_size: int = 16,
    limit: int | None = None,
    seed: int = 1234,
) -> dict[str, Any]:
    """Run lm-eval's `simple_evaluate` on the export of `model`; returns per task its metrics and
    the lm-eval version (seeds fixed: same model and tasks, same figures)."""
    # the optional extra enlace-train[lm-eval]: not in the default environment pyright checks
    import lm_eval  # pyright: ignore[reportMissingImports]
    from lm_eval.evaluator import simple_evaluate  # pyright: ignore[reportMissingImports]
    from lm_eval.tasks import TaskManager  # pyright: ignore[reportMissingImports]

    with tempfile.TemporaryDirectory(prefix="enlace-lm-eval-") as tmp:
        folder = _export(model, tmp)
        out = simple_evaluate(
            model="hf",
            model_args={
                "pretrained": str(folder),
                "dtype": dtype,
                **({"prefix_token_id": p} if (p := _prefix_token(folder)) is not None else {}),
            },
            tasks=list(tasks),
            task_manager=TaskManager(include_path=include) if include else TaskManager(),
            device=device,
            batch_size=batch_size,
            limit=limit,
            random_seed=seed,
            numpy_random_seed=seed,
            torch_random_seed=seed,
            fewshot_random_seed=seed,
        )
    if out is None:  # only on non-zero ranks under a distributed launch
        return {}
    results = {
        task: {k: v for k, v in metrics.items() if isinstance(v, int | float)}
        for task, metrics in out.get("results", {}).items()
    }
    return {"model": model, "lm_eval": lm_eval.__version__, "limit": limit, "results": results}
