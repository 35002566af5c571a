"""Copy records mixed into training micro-batches (issue 30, 35): the records of
enlace_data/copy_records.py, drawn per micro-batch so that a resumed run draws the same rows, in
place of the data's rows or beside them (`train.copy_records_*`), and «A B A» rows of the data's
own text beside them (`train.aba_rows_*`)."""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from typing import Any

import numpy as np
from enlace_config.schema import TrainConfig
from enlace_data.copy_records import (
    LETTERS,
    aba_row,
    copy_record_ids,
    copy_record_row,
    recall_record_row,
)

RECORD_ROW = (0, 1.0)  # a record row's segments (one: it attends across the row) and weights


def mix_copy_records(
    batch: Sequence[np.ndarray[Any, Any]],
    tc: TrainConfig,
    step: int,
    draw: str,
    token_ids: range | None = None,
) -> Sequence[np.ndarray[Any, Any]]:
    """A micro-batch (inputs, targets[, segments[, loss weights]]) of bytes or token ids with copy
    records (enlace_data/copy_records.py): each row replaced by one with probability
    train.copy_records_share, falling linearly to zero at train.copy_records_steps (0: not
    falling); with train.copy_records_beside, the rows all kept and that share of the row count
    (rounded) added as record rows after them. `draw` names the micro-batch (seed, step,
    micro-step, rank), so a resumed run draws the same rows. `token_ids`: the tokenizer's ordinary
    ids, for token rows (shards, or chat on a tokenizer): their records are ids
    (`copy_record_ids`). Chat rows (with segments) become one segment, every position trained; a
    text record copies the row's own bytes or ordinary ids (an added one, those of the row it
    follows), its chat tokens left out (a row of chat tokens alone gets random records). Recall
    records (`recall_record_row`) are bytes only (the config refuses them for token rows);
    letters+recall draws one kind per row. «A B A» rows (`add_aba_rows`) come first: the records
    are mixed into them as into the data's rows."""
    batch = add_aba_rows(batch, tc, step, draw)
    steps = tc.copy_records_steps
    share = tc.copy_records_share * (max(0.0, 1.0 - step / steps) if steps else 1.0)
    if share <= 0:
        return batch
    rng = random.Random(f"copy-records-{draw}")
    if tc.copy_records_beside:  # the data's rows untouched, record rows concatenated after them
        x = batch[0]
        added = [record_ids(rng, tc, x[r], token_ids) for r in range(round(share * x.shape[0]))]
        if not added:
            return batch
        ids = np.stack(added)
        return append_rows(batch, ids[:, :-1], ids[:, 1:])
    x, y, *rest = (a.copy() for a in batch)
    for r in range(x.shape[0]):
        if rng.random() >= share:
            continue
        ids = record_ids(rng, tc, x[r], token_ids)
        x[r], y[r] = ids[:-1], ids[1:]
        for a, fill in zip(rest, RECORD_ROW, strict=False):
            a[r] = fill
    return x, y, *rest


def add_aba_rows(
    batch: Sequence[np.ndarray[Any, Any]], tc: TrainConfig, step: int, draw: str
) -> Sequence[np.ndarray[Any, Any]]:
    """From step train.aba_rows_from on, round(train.aba_rows_share x rows) «A B A» rows
    (`aba_row`) after the micro-batch's rows, the i-th made of the i-th row's own text, trained on
    their repeated A's only, from each repeat's second byte (its first cannot be known: the row
    does not say where a repeat starts): the copy of natural text found by its content, which the
    books' probe measures, with no loss spent on text the data's rows already train. `draw` as
    for the records (a resumed run draws the same rows)."""
    n = round(tc.aba_rows_share * batch[0].shape[0]) if step >= tc.aba_rows_from else 0
    if n == 0:
        return batch
    rng = random.Random(f"aba-{draw}")
    x, y = batch[0], batch[1]
    rows, targets = [], []
    for r in range(n):
        text = np.concatenate([x[r], y[r][-1:]])
        ids, spans = aba_row(rng, text.tolist(), text.shape[0])
        row = np.asarray(ids, dtype=x.dtype)
        trained = np.full(row.shape[0], -1, dtype=y.dtype)
        for start, end in spans:
            trained[start + 1 : end] = row[start + 1 : end]
        rows.append(row[:-1])
        targets.append(trained[1:])
    return append_rows(batch, np.stack(rows), np.stack(targets))


def append_rows(
    batch: Sequence[np.ndarray[Any, Any]],
    inputs: np.ndarray[Any, Any],
    targets: np.ndarray[Any, Any],
) -> Sequence[np.ndarray[Any, Any]]:
    """`batch` with rows of `inputs` and `targets` after its own, each added row one segment with
    loss weight 1 (RECORD_ROW) where the batch carries segments and weights."""
    x, y, *rest = batch
    n = inputs.shape[0]
    rest = [
        np.concatenate([a, np.full((n, a.shape[1]), fill, a.dtype)])
        for a, fill in zip(rest, RECORD_ROW, strict=False)
    ]
    return np.concatenate([x, inputs]), np.concatenate([y, targets]), *rest


def record_ids(
    rng: random.Random, tc: TrainConfig, row: np.ndarray[Any, Any], token_ids: range | None
) -> np.ndarray[Any, Any]:
    """One row of copy records, len(row) + 1 ids (inputs and targets), of the kind
    train.copy_records_source names; a text record copies `row`'s own bytes or ordinary ids."""
    source = tc.copy_records_source
    if source == "letters+recall":
        source = "recall" if rng.random() < 0.5 else "letters"
    text = source == "text"
    length = row.shape[0] + 1
    if token_ids is not None:
        own = [i for i in row.tolist() if i >= token_ids.start] if text else None
        record, _ = copy_record_ids(rng, length, token_ids, own or None)
        return np.asarray(record, dtype=row.dtype)
    letters = LETTERS[: tc.copy_records_letters]
    if source == "recall":
        ids, _ = recall_record_row(rng, length, letters, tuple(tc.copy_records_joins))
    else:
        own_bytes = bytes(int(i) for i in row if i < 256) if text else None
        ids, _ = copy_record_row(rng, length, own_bytes or None, letters)
    return np.frombuffer(ids, dtype=np.uint8).astype(row.dtype)


@functools.cache
def copy_token_ids(kind: str, path: str, tokenizer: str, vocab_size: int) -> range | None:
    """The ids copy records draw from: None for bytes (the records are letters: data.kind bytes,
    or chat on the byte tokenizer); for token shards or chat on a tokenizer, that tokenizer's ids
    after its special tokens (byte pieces and ordinary pieces)."""
    if kind == "bytes" or (kind == "chat" and tokenizer == "bytes"):
        return None
    from enlace_data.tokenizer import load_tokenizer

    specials = load_tokenizer(tokenizer if kind == "chat" else path).special_ids.values()
    return range(max(specials) + 1, vocab_size)
