"""The copy records the smoke base and the warm-up train on (enlace_data.copy_records)."""

from __future__ import annotations

import random
import re

import pytest
from enlace_data.copy_records import LETTERS, aba_row, recall_record_row

# The longer CPU recipe's joins (configs/runs/warmup-cpu-long.yaml).
LONG = ("=", " de ", " del ", " en ", " de la ")
PAIR = re.compile(rb"([a-f]{2})(=| de la | del | de | en )([^ ,|\n]+)")


def test_recall_records_with_one_join_are_the_rows_of_before() -> None:
    """«=» alone (the default, the 10-minute script's) draws no join: the rows are those the
    records gave before joins existed, byte for byte, so its models stay the same to the digit."""
    row, _ = recall_record_row(random.Random(0), 64)
    assert (
        row
        == b"ec=SG\xc3\x8dN\xc3\xa10 ac=EqmA ce=HmjK fc=7mNWIz|ec=SG\xc3\x8dN\xc3\xa10 ce=HmjK ac=Eqm"
    )
    assert recall_record_row(random.Random(3), 256, joins=("=",)) == recall_record_row(
        random.Random(3), 256
    )


def test_recall_records_join_each_pair_alike_and_need_keys_of_several_bytes() -> None:
    """«ab de la Qwhf, cd de la zmu|cd de la zmu, ab de la Qwhf»: every pair of a record has the
    same join, drawn from all the joins across records; the pairs after the «|» are those before
    it in another order, separated by «, » (a join holds a space); each span is a value after the
    «|», whose first byte is told only by its key and join (3-9 bytes back, 6 or more in a good
    part of them: what the «A» after «en de » in «estación de tren de Antequera» needs)."""
    joins: set[bytes] = set()
    keys: list[int] = []
    for seed in range(60):
        row, spans = recall_record_row(random.Random(seed), 256, joins=LONG)
        assert len(row) == 256 and spans
        for record in row.split(b"\n")[:-1]:  # the last one may be cut
            first, second = record.split(b"|")
            pairs = [PAIR.fullmatch(p) for p in first.split(b", ")]
            assert all(pairs) and 3 <= len(pairs) <= 5, record
            said = {m.group(1): (m.group(2), m.group(3)) for m in pairs if m}
            assert len({j for j, _ in said.values()}) == 1, record  # one join for the record
            again = [PAIR.fullmatch(p) for p in second.split(b", ")]
            assert {m.group(1): (m.group(2), m.group(3)) for m in again if m} == said, record
            joins |= {j for j, _ in said.values()}
            assert all(set(v.decode()) <= set(LETTERS) for _, v in said.values()), record
        for start, end in spans:
            value = row[start:end]
            keyed = max(row.rfind(b"|", 0, start) + 1, row.rfind(b", ", 0, start) + 2)
            key = row[keyed:start]  # «cd de la »
            match = PAIR.fullmatch(key + value)
            assert match and match.group(3) == value, (key, value)
            bar = row.rfind(b"|", 0, start)
            assert row.rfind(key + value, 0, bar) >= 0  # said before the «|», after its key
            keys.append(len(key))
    assert joins == {j.encode() for j in LONG}
    assert min(keys) == 3 and max(keys) == 9
    assert sum(k >= 6 for k in keys) > 0.3 * len(keys), keys


def test_aba_rows_repeat_a_span_of_the_text_after_the_next_one() -> None:
    """«A B A» rows: each span repeats the A that stands before the B before it (A 10-30 ids of
    the text, B the 5-25 after it there), the row is made of the text alone, with no separator,
    and a repeat cut by the row's end counts up to it."""
    text = list(b"En un lugar de la Mancha, de cuyo nombre no quiero acordarme, no ha mucho tiempo "
                b"que vivia un hidalgo de los de lanza en astillero, adarga antigua")  # fmt: skip
    cut = 0
    for seed in range(50):
        row, spans = aba_row(random.Random(seed), text, 129)
        assert len(row) == 129 and len(spans) >= 2
        for start, end in spans:
            copy = row[start:end]
            found = [
                (a, b)
                for a in range(max(10, len(copy)), 31)
                for b in range(5, 26)
                if row[start - b - a : start - b][: len(copy)] == copy
                and bytes(row[start - b - a : start]) in bytes(text)  # A then B, as in the text
            ]
            assert found and (end == 129 or any(a == len(copy) for a, _ in found)), (seed, start)
        cut += spans[-1][1] == 129
    assert 0 < cut < 50
    assert aba_row(random.Random(1), text, 129) == aba_row(random.Random(1), text, 129)
    with pytest.raises(ValueError, match="at least one id"):  # not a row that never fills
        aba_row(random.Random(1), [], 129)
