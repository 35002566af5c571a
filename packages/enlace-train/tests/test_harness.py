"""`enlace-train lm-eval` on a tiny task defined from local files: the same code path as the Spanish
benchmarks on the GPU box, without the internet (lm-eval is the optional `lm-eval` extra)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from enlace_config.schema import ModelConfig
from enlace_data.tokenizer import ByteTokenizer
from enlace_model import build_model, save_model

lm_eval = pytest.importorskip("lm_eval", reason="the optional extra enlace-train[lm-eval]")
pytestmark = pytest.mark.slow  # importing lm-eval alone takes seconds (datasets, pyarrow, pandas)

TASK = """\
task: enlace_tiny_es
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{premisa}}}}"
doc_to_choice: "{{{{opciones}}}}"
doc_to_target: "{{{{respuesta}}}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""
DOCS = [
    {"premisa": "El cielo es", "opciones": [" azul", " verde"], "respuesta": 0},
    {"premisa": "La nieve es", "opciones": [" negra", " blanca"], "respuesta": 1},
    {"premisa": "Uno más uno son", "opciones": [" dos", " tres"], "respuesta": 0},
]


def test_lm_eval_runs_a_local_task_on_the_export_and_is_deterministic(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing may reach the Hub
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    from enlace_train.harness import run_lm_eval

    torch.manual_seed(0)
    cfg = ModelConfig(
        vocab_size=264, context_length=64, d_model=32, n_layers=2, n_heads=2, n_kv_heads=1,
        ffn_hidden=64,
    )  # fmt: skip
    save_model(tmp_path / "ckpt", build_model(cfg), cfg)
    ByteTokenizer().save(tmp_path / "ckpt")  # what the trainer puts beside the weights
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in DOCS), encoding="utf-8")
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "enlace_tiny_es.yaml").write_text(TASK.format(data=data), encoding="utf-8")

    def run() -> dict:
        return run_lm_eval(
            str(tmp_path / "ckpt"),
            ["enlace_tiny_es"],
            include=str(tasks),
            device="cpu",
            dtype="float32",
            batch_size=2,
        )

    first = run()
    acc = first["results"]["enlace_tiny_es"]["acc,none"]
    assert acc in (0.0, 1 / 3, 2 / 3, 1.0) and not math.isnan(acc)
    assert run()["results"] == first["results"]
