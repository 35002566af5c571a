"""A COMPLETE marker that lists no files, or lists them in the wrong shape, fails verification
with a CheckpointError naming the marker: never an AttributeError, never a pass (issue 21.14)."""

from __future__ import annotations

import json
import warnings

import pytest
from enlace_model import CheckpointError, atomic_checkpoint, build_model, save_model
from enlace_model.checkpoint import COMPLETE_FILE, find_latest_checkpoint, verify_checkpoint


@pytest.mark.parametrize(
    ("files", "why"),
    [
        ({}, "lists no files"),
        ([], "lists no files"),
        (["model.safetensors", "model.json"], "lists no files"),
        (None, "lists no files"),
        ({"model.safetensors": "abc"}, "is not a size and hash"),
    ],
)
def test_a_marker_without_a_usable_file_list_fails_verification(tmp_path, cfg, files, why):
    with atomic_checkpoint(tmp_path, 1) as d:
        save_model(d, build_model(cfg), cfg)
    ckpt = tmp_path / "checkpoints" / "step_1"
    marker = json.loads((ckpt / COMPLETE_FILE).read_text())
    marker["files"] = files
    (ckpt / COMPLETE_FILE).write_text(json.dumps(marker))
    with pytest.raises(CheckpointError, match=why) as info:
        verify_checkpoint(ckpt)
    assert str(ckpt) in str(info.value)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert find_latest_checkpoint(tmp_path) is None
    assert "step_1" in str(caught[0].message)
