"""Held-out text bits/byte during pretraining (data.eval_text_files), logged like val loss."""

from __future__ import annotations

from pathlib import Path

import pytest
from enlace_train.checkpointing import check_resume_allowed


def test_val_text_bpb_is_logged_at_each_evaluation_and_resume_allows_adding_it(tmp_path, h):
    from enlace_train.trainer import train

    held_out = tmp_path / "held-out.txt"
    held_out.write_text("Érase una vez un hidalgo de la Mancha.\n" * 8, encoding="utf-8")
    run_file = h.make_run_file(
        tmp_path, "text", data={"eval_text_files": [str(held_out)], "eval_text_stride": 16}
    )
    train(h.load(run_file))
    rows = [r for r in h.metrics_rows(h.run_dir_of(run_file)) if "val_loss" in r]
    assert [r["step"] for r in rows] == [4, 8, 12]
    assert all(0 < r["val_text_bpb"] < 9 for r in rows)
    assert rows[-1]["val_text_bpb"] < rows[0]["val_text_bpb"]  # it learns Spanish bytes
    log = (h.run_dir_of(run_file) / "train.log").read_text()
    assert "held-out text bits/byte" in log


def test_a_missing_held_out_file_fails_at_start_up(tmp_path, h):
    from enlace_train.errors import SetupError
    from enlace_train.trainer import train

    run_file = h.make_run_file(tmp_path, "missing", data={"eval_text_files": ["no-such.txt"]})
    with pytest.raises(SetupError, match=r"data.eval_text_files: no-such.txt is not a readable"):
        train(h.load(run_file))
    assert not (Path(h.run_dir_of(run_file)) / "metrics.jsonl").exists()


def test_checkpoints_from_before_the_new_keys_still_resume():
    saved = {"data": {"kind": "bytes"}, "hardware": {"dtype": "float16"}}
    now = {
        "data": {"kind": "bytes", "eval_text_files": ["x.txt"], "eval_text_stride": None},
        "hardware": {"dtype": "float16", "compute_capability": [7, 5], "allow_other_board": False},
    }
    allowed = check_resume_allowed(saved, now, {}, checkpoint=Path("ckpt"), step=3)
    # keys at their schema default are no change at all; the others are allowed and named
    assert allowed == [
        "data.eval_text_files: None -> ['x.txt']",
        "hardware.compute_capability: None -> [7, 5]",
    ]
    now["data"]["eval_text_stride"] = 64
    allowed = check_resume_allowed(saved, now, {}, checkpoint=Path("ckpt"), step=3)
    assert "data.eval_text_stride: None -> 64" in allowed and len(allowed) == 3
