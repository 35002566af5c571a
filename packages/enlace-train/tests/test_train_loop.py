"""The loop's arithmetic: accumulation equivalence, weight-decay groups, out-of-memory handling,
init_from, and metrics.jsonl being cut back on resume."""

from __future__ import annotations

import json
import random
import re

import pytest
import torch
from enlace_model.checkpoint import list_checkpoints, load_state_dict
from enlace_train import trainer
from enlace_train.errors import OutOfMemory
from enlace_train.metrics import read_metrics, truncate_metrics
from enlace_train.optim import build_optimizer
from enlace_train.trainer import micro_batch_suggestion, train


def weights(run_dir):
    return {k: v.clone() for k, v in load_state_dict(list_checkpoints(run_dir)[-1]).items()}


def test_accumulation_k_times_b_equals_one_batch_of_k_b(write_run, h):
    steps = {"max_steps": 3, "warmup_steps": 0, "decay_steps": 0, "global_batch_size": 8}
    one = train(h.load(write_run("one", hardware={"micro_batch_size": 8}, train=steps)))
    four = train(h.load(write_run("four", hardware={"micro_batch_size": 2}, train=steps)))
    a = [r["loss"] for r in h.metrics_rows(one.run_dir) if "loss" in r]
    b = [r["loss"] for r in h.metrics_rows(four.run_dir) if "loss" in r]
    assert len(a) == 3 and a == pytest.approx(b, rel=1e-5)
    ga = [r["grad_norm"] for r in h.metrics_rows(one.run_dir) if "loss" in r]
    gb = [r["grad_norm"] for r in h.metrics_rows(four.run_dir) if "loss" in r]
    assert ga == pytest.approx(gb, rel=1e-4)
    wa, wb = weights(one.run_dir), weights(four.run_dir)
    for key in wa:
        torch.testing.assert_close(wa[key], wb[key], rtol=1e-4, atol=1e-5)


def test_weight_decay_on_matrices_only_embeddings_by_config(h, write_run):
    from enlace_model import build_model
    from enlace_train.backends import setup_backend

    cfg = h.load(write_run("wd")).config
    model = build_model(cfg.model)
    backend = setup_backend(cfg.hardware)
    decay, no_decay = build_optimizer(model, cfg, backend).param_groups
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    assert decay["weight_decay"] == cfg.train.weight_decay and no_decay["weight_decay"] == 0.0
    assert "embed.weight" not in decayed and not any("norm" in n for n in decayed)
    assert "layers.0.attn.q_proj.weight" in decayed and "layers.1.mlp.down_proj.weight" in decayed
    cfg.train.decay_embeddings = True
    decay, _ = build_optimizer(model, cfg, backend).param_groups
    assert "embed.weight" in {names[id(p)] for p in decay["params"]}


def test_out_of_memory_names_the_micro_batch_and_saves_nothing_half_written(
    write_run, h, monkeypatch
):
    real_build = trainer.build_model
    calls = {"n": 0}

    def build_model_that_runs_out(cfg, **kw):
        model = real_build(cfg, **kw)
        forward = model.forward

        def forward_oom(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] > 4:  # two steps of two micro-batches, then the device is "full"
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            return forward(*args, **kwargs)

        model.forward = forward_oom
        return model

    monkeypatch.setattr(trainer, "build_model", build_model_that_runs_out)
    path = write_run(
        "oom",
        hardware={"micro_batch_size": 4},
        train={"global_batch_size": 8, "checkpoint_every": 1},
    )
    with pytest.raises(OutOfMemory) as info:
        train(h.load(path))
    msg = str(info.value)
    assert "hardware.micro_batch_size=4" in msg and "try hardware.micro_batch_size=2" in msg
    ckpt_root = h.run_dir_of(path) / "checkpoints"
    assert sorted(p.name for p in ckpt_root.iterdir()) == ["step_1", "step_2"]
    assert micro_batch_suggestion(6, 12) == 4 and micro_batch_suggestion(1, 8) is None


def test_init_from_starts_a_new_run_from_weights_and_optimizer(write_run, h):
    src = train(h.load(write_run("src", train={"max_steps": 6, "decay_steps": 2})))
    src_w = weights(src.run_dir)
    path = write_run(
        "branch",
        train={
            "max_steps": 1,
            "warmup_steps": 0,
            "decay_steps": 0,
            "lr": 1e-9,
            "min_lr": 0.0,
            "init_from": str(src.run_dir),
            "init_optimizer": True,
        },
    )
    branch = train(h.load(path))
    new_w = weights(branch.run_dir)
    for key in src_w:
        torch.testing.assert_close(new_w[key], src_w[key], rtol=0, atol=1e-6)
    state = torch.load(list_checkpoints(branch.run_dir)[-1] / "trainer_state.pt", weights_only=True)
    assert state["step"] == 1 and state["init_from"] == str(src.run_dir)
    adam_steps = {float(s["step"]) for s in state["optimizer"]["state"].values()}
    assert adam_steps == {7.0}  # the source's 6 AdamW steps, then one more
    assert "initialised from" in (branch.run_dir / "train.log").read_text()


def test_truncate_metrics_keeps_rows_up_to_the_step_and_drops_a_torn_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = [{"step": s, "loss": 1.0 / s} for s in range(1, 6)] + [{"step": 4, "val_loss": 2.0}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 6, "lo')
    assert truncate_metrics(path, 4) == 5
    assert [r["step"] for r in read_metrics(path)] == [1, 2, 3, 4, 4]


def test_copy_records_replace_rows_early_and_none_after_their_steps() -> None:
    """train.copy_records_share: at step 0 every row is «letters|letters» records (share 1),
    at half the steps about half the rows, from copy_records_steps on none (with 0 steps, the
    share at every step); the same draw gives the same rows (exact resume), and each replaced
    row's targets are its inputs shifted by one."""
    import numpy as np
    from enlace_config.schema import TrainConfig
    from enlace_train.copy_mixing import mix_copy_records

    tc = TrainConfig(max_steps=100, global_batch_size=64, lr=1e-3, copy_records_share=1.0,
                     copy_records_steps=50)  # fmt: skip
    text = np.frombuffer(b"En un lugar de la Mancha, " * 400, dtype=np.uint8).astype(np.int64)
    x = np.stack([text[i : i + 128] for i in range(64)])
    y = np.stack([text[i + 1 : i + 129] for i in range(64)])

    def records(step: int, draw: str = "a") -> list[bool]:
        mx, my = mix_copy_records((x, y), tc, step, draw)
        assert (mx[:, 1:] == my[:, :-1]).all()
        return [b"|" in bytes(row.astype(np.uint8)) for row in mx]

    assert all(records(0)) and not any(records(50)) and not any(records(99))
    assert 16 < sum(records(25)) < 48
    assert records(25) == records(25) and records(25) != records(25, draw="b")
    unchanged = mix_copy_records((x, y), tc, 60, "a")
    assert unchanged[0] is x  # after the records' steps the batch is passed through as it is
    constant = tc.model_copy(update={"copy_records_share": 0.5, "copy_records_steps": 0})
    late = [
        b"|" in bytes(r.astype(np.uint8)) for r in mix_copy_records((x, y), constant, 99, "a")[0]
    ]
    assert 16 < sum(late) < 48  # copy_records_steps 0: the share does not fall


def test_copy_records_beside_keep_every_row_and_add_the_share_of_record_rows() -> None:
    """train.copy_records_beside: the micro-batch's rows all come back unchanged, followed by
    round(share x rows) record rows (8 of 16 at share 0.5, 4 at a quarter, none after the steps),
    each row's targets its inputs shifted by one and trained everywhere, one segment each; the
    same draw gives the same rows (exact resume), and they are the rows replacing would write."""
    import numpy as np
    from enlace_config.schema import TrainConfig
    from enlace_train.copy_mixing import mix_copy_records, record_ids

    tc = TrainConfig(max_steps=100, global_batch_size=16, lr=1e-3, copy_records_share=0.5,
                     copy_records_steps=100, copy_records_source="letters+recall",
                     copy_records_beside=True)  # fmt: skip
    text = np.frombuffer(b"En un lugar de la Mancha, " * 400, dtype=np.uint8).astype(np.int64)
    x = np.stack([text[i : i + 128] for i in range(16)])
    y = np.stack([text[i + 1 : i + 129] for i in range(16)])
    y[:, :10] = -1
    segments = np.ones_like(x)
    for step, added in ((0, 8), (50, 4), (100, 0)):
        mx, my, ms = mix_copy_records((x, y, segments), tc, step, "a")
        assert mx.shape == (16 + added, 128) and my.shape == mx.shape and ms.shape == mx.shape
        assert (mx[:16] == x).all() and (my[:16] == y).all() and (ms[:16] == segments).all()
        new = mx[16:]
        assert all(b"|" in bytes(r.astype(np.uint8)) for r in new)
        assert (new[:, 1:] == my[16:, :-1]).all() and (my[16:] >= 0).all() and (ms[16:] == 0).all()
    weights = np.full(x.shape, 3.0, dtype=np.float32)  # chat rows' loss weights
    *_, ms, mw = mix_copy_records((x, y, segments, weights), tc, 0, "a")
    assert (ms[16:] == 0).all() and (mw[:16] == 3.0).all() and (mw[16:] == 1.0).all()
    in_place = tc.model_copy(update={"copy_records_beside": False, "copy_records_share": 1.0})
    mx, _, ms, mw = mix_copy_records((x, y, segments, weights), in_place, 0, "a")
    assert (ms == 0).all() and (mw == 1.0).all() and mw.dtype == np.float32
    again = mix_copy_records((x, y), tc, 0, "a")[0]
    assert (again == mix_copy_records((x, y), tc, 0, "a")[0]).all()
    assert not (again == mix_copy_records((x, y), tc, 0, "b")[0]).all()
    rng = random.Random("copy-records-a")  # the same generator, row for row, as replacing uses
    assert all((again[16 + i] == record_ids(rng, tc, x[i], None)[:-1]).all() for i in range(8))


def test_a_run_with_records_beside_trains_on_more_rows_than_its_batch(write_run, h) -> None:
    """The trainer takes the longer micro-batches of copy_records_beside (a record row beside each
    two of the data's): the run finishes with other losses than without records, and a second
    run with the same config gives the same ones (the draws are the step's, as a resume needs)."""
    steps = {"max_steps": 3, "warmup_steps": 0, "decay_steps": 0, "global_batch_size": 8}
    beside = {**steps, "copy_records_share": 0.5, "copy_records_beside": True}
    runs = [
        train(h.load(write_run(name, train=config)))
        for name, config in (("plain", steps), ("beside", beside), ("again", beside))
    ]
    plain, first, again = ([r["loss"] for r in h.metrics_rows(run.run_dir) if "loss" in r]
                           for run in runs)  # fmt: skip
    assert len(first) == 3 and first == again and first != plain


def test_aba_rows_come_from_their_step_beside_the_rows_trained_on_their_repeats() -> None:
    """train.aba_rows_*: before aba_rows_from the batch passes as it is; from it, round(share x
    rows) «A B A» rows follow the data's rows (unchanged), the i-th made of the i-th row's own
    text, their targets -1 but on each repeat after its first byte, where they are the byte
    that comes (the copy); the same draw gives the same rows (exact resume); records beside are
    mixed into them as into the data's rows (share x all rows)."""
    import numpy as np
    from enlace_config.schema import TrainConfig
    from enlace_data.copy_records import aba_row
    from enlace_train.copy_mixing import mix_copy_records

    tc = TrainConfig(max_steps=100, global_batch_size=16, lr=1e-3, aba_rows_share=0.5,
                     aba_rows_from=40)  # fmt: skip
    text = np.frombuffer(b"En un lugar de la Mancha, de cuyo nombre no quiero acordarme, " * 40,
                         dtype=np.uint8).astype(np.int64)  # fmt: skip
    x = np.stack([text[7 * i : 7 * i + 128] for i in range(16)])
    y = np.stack([text[7 * i + 1 : 7 * i + 129] for i in range(16)])
    assert mix_copy_records((x, y), tc, 39, "a")[0] is x
    mx, my = mix_copy_records((x, y), tc, 40, "a")
    assert mx.shape == my.shape == (24, 128)
    assert (mx[:16] == x).all() and (my[:16] == y).all()
    rng = random.Random("aba-a")
    for i in range(8):
        row, spans = aba_row(rng, text[7 * i : 7 * i + 129].tolist(), 129)
        assert mx[16 + i].tolist() == row[:-1]
        trained = [t for t in range(128) if my[16 + i, t] >= 0]
        assert trained == [t - 1 for s, e in spans for t in range(s + 1, e)]
        assert all(my[16 + i, t] == row[t + 1] for t in trained)
    again = mix_copy_records((x, y), tc, 40, "a")
    assert all((u == v).all() for u, v in zip(again, (mx, my), strict=True))
    assert not (mix_copy_records((x, y), tc, 40, "b")[0] == mx).all()
    beside = tc.model_copy(update={"copy_records_share": 0.5, "copy_records_beside": True,
                                   "copy_records_steps": 0})  # fmt: skip
    bx, by = mix_copy_records((x, y), beside, 40, "a")
    assert bx.shape == (36, 128) and (bx[:24] == mx).all() and (by[:24] == my).all()


def test_a_run_with_aba_rows_trains_on_them_from_their_step(write_run, h) -> None:
    """The trainer adds the «A B A» rows with no copy records (aba_rows_share alone): the losses
    are those of the plain run until aba_rows_from, others after, the same in a second run."""
    steps = {"max_steps": 4, "warmup_steps": 0, "decay_steps": 0, "global_batch_size": 8,
             "log_every": 1}  # fmt: skip
    aba = {**steps, "aba_rows_share": 1.0, "aba_rows_from": 2}
    runs = [
        train(h.load(write_run(name, train=config)))
        for name, config in (("plain", steps), ("aba", aba), ("again", aba))
    ]
    plain, first, again = ([r["loss"] for r in h.metrics_rows(run.run_dir) if "loss" in r]
                           for run in runs)  # fmt: skip
    assert len(first) == 4 and first == again
    assert first[:2] == plain[:2] and first[2:] != plain[2:]


def test_copy_records_draw_from_the_letters_and_the_text_they_are_told() -> None:
    """copy_records_letters: 4 letters give rows of «abca|abca» records over «abcd» alone;
    copy_records_source text: records copy spans of the row's own text; letters+recall: rows of
    letter records and rows of recall records («ab=qwhf cd=zmu|cd=zmu ab=qwhf»)."""
    import numpy as np
    from enlace_config.schema import TrainConfig
    from enlace_train.copy_mixing import mix_copy_records

    text = np.frombuffer(b"En un lugar de la Mancha, " * 40, dtype=np.uint8).astype(np.int64)
    x, y = text[None, :128].repeat(4, 0), text[None, 1:129].repeat(4, 0)
    common = {"max_steps": 10, "global_batch_size": 4, "lr": 1e-3, "copy_records_share": 1.0,
              "copy_records_steps": 10}  # fmt: skip
    few = TrainConfig(**common, copy_records_letters=4)
    rows = [bytes(r.astype(np.uint8)) for r in mix_copy_records((x, y), few, 0, "a")[0]]
    assert all(set(r) <= set(b"abcd|\n") for r in rows), rows
    # By default the records copy capitals and digits too (a name's first letter, a temperature);
    # 32 is the lower case alone.
    from enlace_data.copy_records import LETTERS

    assert TrainConfig.model_fields["copy_records_letters"].default == len(LETTERS)  # all of it
    for source in ("letters", "recall"):
        every = TrainConfig(**common, copy_records_source=source)
        drawn = b"".join(
            bytes(r.astype(np.uint8)) for r in mix_copy_records((x, y), every, 0, "a")[0]
        )
        assert re.search(rb"[A-Z]", drawn) and re.search(rb"[0-9]", drawn), drawn
        lower = TrainConfig(**common, copy_records_source=source, copy_records_letters=32)
        drawn = b"".join(
            bytes(r.astype(np.uint8)) for r in mix_copy_records((x, y), lower, 0, "a")[0]
        )
        assert not re.search(rb"[A-Z0-9]", drawn), drawn
    spans = TrainConfig(**common, copy_records_source="text")
    rows = [bytes(r.astype(np.uint8)) for r in mix_copy_records((x, y), spans, 0, "a")[0]]
    for r in rows:
        first, copy = r.split(b"\n")[0].split(b"|")
        assert first == copy and first in bytes(text.astype(np.uint8)), r
    mixed = TrainConfig(**common, copy_records_source="letters+recall")
    kinds = set()
    for draw in "abcdefgh":
        for r in mix_copy_records((x, y), mixed, 0, draw)[0]:
            first, copy = bytes(r.astype(np.uint8)).split(b"\n")[0].split(b"|")
            pairs = dict(p.split(b"=") for p in first.split(b" ")) if b"=" in first else None
            if pairs:  # recall: the same key=value pairs after the «|», in another order
                assert dict(p.split(b"=") for p in copy.split(b" ")) == pairs, r
            else:
                assert first == copy, r
            kinds.add(pairs is not None)
    assert kinds == {True, False}  # half and half: both kinds drawn
    # copy_records_joins reaches the recall records: « de » joins every pair, «, » between them.
    joined = TrainConfig(**common, copy_records_source="recall", copy_records_joins=[" de "])
    rows = [bytes(r.astype(np.uint8)) for r in mix_copy_records((x, y), joined, 0, "a")[0]]
    records = [record for r in rows for record in r.split(b"\n")[:-1]]  # whole records only
    assert records, rows
    for record in records:
        first, copy = record.split(b"|")
        pairs = first.split(b", ")
        assert len(pairs) >= 3 and all(p[2:6] == b" de " for p in pairs), record
        assert sorted(copy.split(b", ")) == sorted(pairs), record


def test_copy_records_in_chat_rows_are_one_segment_trained_everywhere() -> None:
    """data.kind chat: a replaced row's targets are all trained (no -1 left from the chat's masks)
    and its segments one id, so the records attend across the row; a text record copies the row's
    own bytes without its chat tokens (ids from 256); rows left alone keep their masks and
    segments."""
    import numpy as np
    from enlace_config.schema import TrainConfig
    from enlace_train.copy_mixing import mix_copy_records

    said = np.frombuffer(b"Recuerda que mi hija se llama Irene. " * 8, dtype=np.uint8)
    row = np.concatenate([[260], said.astype(np.int64), [261]])[:129]
    x, y = row[None, :128].repeat(8, 0), row[None, 1:129].repeat(8, 0)
    y[:, :64] = -1  # the prompt is not trained, only the reply
    segments = np.zeros_like(x)
    segments[:, 100:] = 7  # a second conversation packed into the row
    common = {"max_steps": 10, "global_batch_size": 8, "lr": 1e-3, "copy_records_steps": 1000}
    half = mix_copy_records((x, y, segments), TrainConfig(**common, copy_records_share=0.5), 0, "c")
    mx, my, ms = half
    replaced = [bool((mx[r] != x[r]).any()) for r in range(8)]
    assert any(replaced) and not all(replaced), replaced
    for r in range(8):
        if replaced[r]:
            assert (
                (my[r] >= 0).all() and (mx[r, 1:] == my[r, :-1]).all() and (ms[r] == ms[r, 0]).all()
            )
        else:
            assert (my[r] == y[r]).all() and (ms[r] == segments[r]).all()
    text = TrainConfig(**common, copy_records_share=1.0, copy_records_source="text")
    for r in mix_copy_records((x, y, segments), text, 0, "c")[0]:
        assert (r < 256).all()
        first, copy = bytes(r.astype(np.uint8)).split(b"\n")[0].split(b"|")
        assert first == copy and first in said.tobytes(), first


def test_copy_records_of_token_rows_are_ids_copied_after_themselves() -> None:
    """data.kind shards: the records are ids «A A» (4-8 of the tokenizer's ordinary ids, or spans
    of the row's own ids), never a special id, each copy right after its original."""
    import numpy as np
    from enlace_config.schema import TrainConfig
    from enlace_data.copy_records import copy_record_ids
    from enlace_train.copy_mixing import mix_copy_records

    ordinary = range(16, 600)
    text = np.arange(1000, 1129, dtype=np.int64)  # ids beyond `ordinary`: a copied span shows it
    x, y = text[None, :128].repeat(4, 0), text[None, 1:129].repeat(4, 0)
    common = {"max_steps": 10, "global_batch_size": 4, "lr": 1e-3, "copy_records_share": 1.0,
              "copy_records_steps": 10}  # fmt: skip
    mx, my = mix_copy_records((x, y), TrainConfig(**common), 0, "a", ordinary)
    assert (mx[:, 1:] == my[:, :-1]).all() and all(int(i) in ordinary for i in mx.flat)
    spans = mix_copy_records(
        (x, y), TrainConfig(**common, copy_records_source="text"), 0, "a", ordinary
    )
    assert all(1000 <= int(i) < 1129 for i in spans[0].flat)
    import random

    row, copies = copy_record_ids(random.Random(0), 128, ordinary)
    assert len(row) == 128 and copies
    for start, end in copies:
        n = end - start
        assert 4 <= n <= 8 and row[start - n : start] == row[start:end]
