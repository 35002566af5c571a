"""Byte n-gram baselines on the smoke corpus: the bits per byte a model that only learned letter
statistics reaches, which the smoke run must clearly beat.

    uv run python benchmarks/ngram_baseline.py [--data data/smoke] [--order 3]

Counts on train.txt, bits per byte on val.txt (the same split the trainer evaluates on), for two
standard smoothings of an order-n byte model: interpolated Witten-Bell and interpolated Kneser-Ney
(absolute discount 0.75, continuation counts for the lower orders). Both are printed; the better one
is the baseline. Counts are dense numpy tables (256^n entries: n <= 3 keeps it at 64 MB).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

V = 256


def _codes(data: np.ndarray, order: int) -> np.ndarray:
    """Integer code of every n-gram (n = order) in data."""
    n = len(data) - order + 1
    code = np.zeros(n, dtype=np.int64)
    for k in range(order):
        code = code * V + data[k : k + n].astype(np.int64)
    return code


def _counts(data: np.ndarray, order: int) -> np.ndarray:
    return np.bincount(_codes(data, order), minlength=V**order).astype(np.float64)


def witten_bell(train: np.ndarray, val: np.ndarray, order: int) -> float:
    """Interpolated Witten-Bell; unigram add-one. Returns bits per byte on val."""
    p = (_counts(train, 1) + 1) / (len(train) + V)  # P(c)
    probs_by_order = [p]
    for n in range(2, order + 1):
        c = _counts(train, n).reshape(-1, V)  # rows: context of n-1 bytes
        total = c.sum(1, keepdims=True)
        types = (c > 0).sum(1, keepdims=True).astype(np.float64)
        lower = probs_by_order[-1].reshape(-1, V)  # context of n-2 bytes
        # the lower-order row for context (a1..a_{n-1}) is the one for (a2..a_{n-1})
        lower_rows = np.tile(lower, (V, 1))
        with np.errstate(invalid="ignore", divide="ignore"):
            mix = (c + types * lower_rows) / (total + types)
        mix = np.where(total > 0, mix, lower_rows)
        probs_by_order.append(mix.reshape(-1))
    codes = _codes(val, order)
    return float(-np.log2(probs_by_order[-1][codes]).mean())


def kneser_ney(train: np.ndarray, val: np.ndarray, order: int, d: float = 0.75) -> float:
    """Interpolated Kneser-Ney with absolute discount d. Returns bits per byte on val."""
    # lowest order: continuation probability of c (how many distinct bytes precede it), with a
    # floor so unseen bytes keep some mass
    c2 = _counts(train, 2).reshape(V, V)
    cont = (c2 > 0).sum(0).astype(np.float64) + 0.5
    p = cont / cont.sum()
    for n in range(2, order + 1):
        if n < order:  # middle orders use continuation counts N1+(. ctx c)
            full = _counts(train, n + 1).reshape(V, -1)
            c = (full > 0).sum(0).astype(np.float64).reshape(-1, V)
        else:
            c = _counts(train, n).reshape(-1, V)
        total = c.sum(1, keepdims=True)
        types = (c > 0).sum(1, keepdims=True).astype(np.float64)
        lower_rows = np.tile(p.reshape(-1, V), (V, 1))
        with np.errstate(invalid="ignore", divide="ignore"):
            mix = np.maximum(c - d, 0) / total + d * types / total * lower_rows
        p = np.where(total > 0, mix, lower_rows).reshape(-1)
    codes = _codes(val, order)
    return float(-np.log2(p[codes]).mean())


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", default="data/smoke", help="directory with train.txt and val.txt")
    ap.add_argument("--order", type=int, default=3, choices=(1, 2, 3))
    args = ap.parse_args()
    root = Path(args.data)
    train = np.fromfile(root / "train.txt", dtype=np.uint8)
    val = np.fromfile(root / "val.txt", dtype=np.uint8)
    print(f"data: {root} (train {len(train):,} bytes, val {len(val):,} bytes)")
    uniform = math.log2(V)
    print(f"uniform over 256 bytes        {uniform:.3f} bits/byte")
    for n in range(1, args.order + 1):
        wb = witten_bell(train, val, n)
        kn = kneser_ney(train, val, n) if n > 1 else wb
        print(f"byte {n}-gram  Witten-Bell {wb:.3f}  Kneser-Ney {kn:.3f} bits/byte")
    best = min(witten_bell(train, val, args.order), kneser_ney(train, val, args.order))
    print(f"baseline (best byte {args.order}-gram): {best:.3f} bits/byte on val")


if __name__ == "__main__":
    main()
