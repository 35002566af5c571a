"""A hand-made induction head, shared by the tests of the copy and reading probes: what they must
score as copying (benchmarks/copy_probe.py, benchmarks/reading_probe.py)."""

from __future__ import annotations


def induction(ids: list[int], key_length: int = 3) -> list[int]:
    """What an induction head does, by hand: find where the last `key_length` tokens appeared
    before and predict what followed them there (else repeat the current token)."""
    out = []
    for t in range(len(ids)):
        key = ids[max(0, t - key_length + 1) : t + 1]
        match = next(
            (j for j in range(t - 1, len(key) - 2, -1) if ids[j - len(key) + 1 : j + 1] == key),
            None,
        )
        out.append(ids[match + 1] if match is not None else ids[t])
    return out
