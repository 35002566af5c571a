"""Can a base model copy from its context? (issue 30: the chat model must copy the question's city
into its search and the result's facts into its answer.)

    uv run python benchmarks/copy_probe.py probe RUN_OR_CHECKPOINT [RUN_OR_CHECKPOINT ...]
    uv run python benchmarks/copy_probe.py where RUN_OR_CHECKPOINT [...] [--key 4]
    uv run python benchmarks/copy_probe.py corpus OUT_DIR [--share 1.0]

`probe` feeds held-out sentences of the built-in books as «A B A» (A: 20-40 bytes, B: 10-30 bytes,
the val split, never trained on) and reports the model's greedy next-token accuracy, teacher-forced,
on A's tokens the first time (what the language model alone predicts) and the second time, when
the same tokens stand a few dozen positions back. A model with induction heads (attend to where
the current token appeared before, predict what followed it) is near 100 % the second time; one
without them gains nothing from the repetition, and the gap "second - first" is about zero. The
chat model copies names and facts through the same mechanism, but a base need not have the gap
for its chat model to: the script's base has none (-4 points), and its reading warm-up forms it
within 200 steps (+42; the chat model +36, the longer recipe's +44), while bases given the gap
by repeats in their own rows fine-tuned no better (benchmarks/CHAT.md, fifteenth session). The
longer recipe's base has it since the twenty-fifth session (+38.8 at the median of 3 seeds:
«A B A» rows beside its books, `train.aba_rows_share`, with twice the steps). Probe the model the
fine-tuning starts from, not only the base.

It also reads 128-byte rows of random-letter copy records («qwhfk|qwhfk», the generator that
`train.copy_records_share` mixes into pretraining, another seed) and reports the greedy accuracy
on the copies' bytes, for records of lower-case letters ("letters"), of capitals ("capitals") and
of digits ("digits"): a few per cent (1 in 32, or in 10 digits) for a model that does not copy,
near 100 % for one that does. The books' gap says whether a base copies natural text; the records
say whether it has the mechanism at all, with nothing else to lean on, and for which bytes: a
copy head copies the bytes it was trained to copy, and a name starts with a capital, a
temperature is digits (benchmarks/CHAT.md, eleventh session: a base that copies lower-case
letters at 99 % copied capitals at 1.5 %). And "text": records of 10-20 bytes of the held-out
books («de la casa|de la casa»), where one byte does not say where a copy stands (the «a» of «la»
and of «casa»): a head keyed on the current byte alone copies the letters and not these; one
keyed on several bytes copies both (CHAT.md, twelfth session: 41 % for the script's base, 98.5 %
for a base with text records, whose books' gap still stayed at zero).

`where` says where a base's bits go on the held-out books (consecutive windows of 128 bytes of
the val split): each byte by whether the `--key` bytes before it occurred earlier in its
window and, if so, whether the byte that followed them there is this one ("repeat right": a copy
would be right; "repeat wrong": a copy would be wrong; "new": nothing to copy). A base that copies
wins on the first and pays on the second; a worse language model pays on "new", nine bytes in ten.
So it tells a copying cost from a budget cost: a base given the books' gap that loses bits per
byte on "new" lost them to what it learned instead, not to copies it made (CHAT.md, twenty-fifth
session).

`corpus` writes a copy-heavy bytes corpus for `data.path` (kind: bytes): the built-in books' train
split where, with probability --share, a short sentence comes back after the next one («A B A»),
and the books' own val split unchanged, so bits/byte stays comparable with the plain runs.
"""

from __future__ import annotations

import argparse
import math
import random
import re
from collections.abc import Callable, Sequence
from pathlib import Path

SENTENCE_END = re.compile(r"(?<=[.;:!?,])\s+")


def _sentences(text: str) -> list[str]:
    return [s.replace("\n", " ") for s in SENTENCE_END.split(text)]


def probe_pairs(n: int = 100, seed: int = 1) -> list[tuple[str, str]]:
    """n (A, B) pairs of consecutive held-out sentences, A 20-40 bytes and B 10-30 bytes."""
    from enlace_data.sample import builtin_split

    parts = _sentences(builtin_split("val").decode())
    rng = random.Random(seed)
    pairs: list[tuple[str, str]] = []
    while len(pairs) < n:
        i = rng.randrange(len(parts) - 1)
        a, b = parts[i], parts[i + 1]
        if 20 <= len(a.encode()) <= 40 and 10 <= len(b.encode()) <= 30:
            pairs.append((a, b))
    return pairs


def copy_accuracy(
    predict: Callable[[list[int]], list[int]],
    encode: Callable[[str], list[int]],
    pairs: list[tuple[str, str]],
) -> tuple[float, float]:
    """(first, second): top-1 accuracy on A's tokens after its first two, at each occurrence in
    «A B A». `predict(ids)` gives the predicted next token at every position of `ids`."""
    hits, counts = [0, 0], [0, 0]
    for a, b in pairs:
        prefix, span = encode(f"{a} {b} "), encode(a)
        predicted = predict(prefix + span)
        for k in range(2, len(span)):  # the first two tokens of a repeat are not yet a copy
            for occurrence, start in enumerate((0, len(prefix))):
                hits[occurrence] += predicted[start + k - 1] == span[k]
                counts[occurrence] += 1
    return hits[0] / counts[0], hits[1] / counts[1]


Row = tuple[bytes | list[int], list[tuple[int, int]]]  # a row of copy records, its copies' spans


def letter_rows(
    n: int = 50, length: int = 128, seed: int = 1, letters: str | None = None
) -> list[Row]:
    """n rows of random-letter copy records «qwhfk|qwhfk» (enlace_data/copy_records.py, the
    generator `train.copy_records_share` trains on, with another seed) and their copies' spans;
    `letters`: what the records draw from (default: the lower case)."""
    from enlace_data.copy_records import LOWER_CASE, copy_record_row

    rng = random.Random(f"copy-probe-{seed}")
    return [copy_record_row(rng, length, letters=letters or LOWER_CASE) for _ in range(n)]


def text_rows(n: int = 50, length: int = 128, seed: int = 1) -> list[Row]:
    """n rows of text records «de la casa|de la casa»: spans of 10-20 bytes of the books' held-out
    split (`copy_record_row` with text, what `train.copy_records_source: text` trains on), each
    row from another place of it."""
    from enlace_data.copy_records import copy_record_row
    from enlace_data.sample import builtin_split

    val = builtin_split("val")
    rng = random.Random(f"copy-probe-text-{seed}")
    rows = []
    for _ in range(n):
        start = rng.randrange(len(val) - 4 * length)
        rows.append(copy_record_row(rng, length, val[start : start + 4 * length]))
    return rows


def record_rows(n: int = 50) -> dict[str, list[Row]]:
    """The probe's record rows by what they copy: lower-case letters, capitals, digits, text."""
    from enlace_data.copy_records import CAPITALS, DIGITS, LOWER_CASE

    kinds = {"letters": LOWER_CASE, "capitals": CAPITALS, "digits": DIGITS}
    rows = {kind: letter_rows(n, letters=letters) for kind, letters in kinds.items()}
    return {**rows, "text": text_rows(n)}


def token_rows(ids: range, n: int = 50, length: int = 128, seed: int = 1) -> list[Row]:
    """The letter rows' counterpart for a model with a tokenizer: n rows of records «A A» of 4-8
    random ordinary ids (`copy_record_ids`, what `train.copy_records_share` mixes into token
    shards, another seed)."""
    from enlace_data.copy_records import copy_record_ids

    rng = random.Random(f"copy-probe-{seed}")
    return [copy_record_ids(rng, length, ids) for _ in range(n)]


def letter_accuracy(predict: Callable[[list[int]], list[int]], rows: list[Row]) -> float:
    """Greedy accuracy on the copies' bytes after their first two (as the books probe: the first
    bytes of a repeat are not yet a copy). Random letters: without copying, about 1 in 32."""
    hits = count = 0
    for row, spans in rows:
        ids = list(row)
        predicted = predict(ids)
        for start, end in spans:
            for t in range(start + 2, end):
                hits += predicted[t - 1] == ids[t]
                count += 1
    return hits / count


def probe(
    path: str, pairs: list[tuple[str, str]], rows: dict[str, list[Row]]
) -> tuple[float, float, dict[str, float]]:
    """(first, second, records): `copy_accuracy` on the books and `letter_accuracy` on each kind
    of `rows` (`record_rows`) of a run directory or checkpoint, greedy, with its own tokenizer (for
    a tokenizer other than bytes, one kind: records of random ids, `token_rows`, as many rows)."""
    import torch
    from enlace_data.tokenizer import ByteTokenizer, load_tokenizer
    from enlace_model.checkpoint import load_model, resolve_checkpoint

    checkpoint = resolve_checkpoint(path)
    model, tokenizer = load_model(checkpoint).eval(), load_tokenizer(checkpoint)

    def predict(ids: list[int]) -> list[int]:
        with torch.no_grad():
            return model(torch.tensor([ids])).logits[0].argmax(-1).tolist()

    first, second = copy_accuracy(predict, tokenizer.encode, pairs)
    if not isinstance(tokenizer, ByteTokenizer):
        ordinary = range(max(tokenizer.special_ids.values()) + 1, tokenizer.vocab_size)
        rows = {"ids": token_rows(ordinary, len(next(iter(rows.values()))))}
    return first, second, {kind: letter_accuracy(predict, r) for kind, r in rows.items()}


REPEAT_CLASSES = ("new", "repeat right", "repeat wrong")


def repeat_classes(row: Sequence[int], key: int) -> list[str]:
    """For each position t of `row` but the last (where the next byte, row[t + 1], is predicted):
    "new" when row[t - key + 1 .. t] did not occur before in the row, else "repeat right" or
    "repeat wrong" by whether the byte after its latest occurrence is row[t + 1] (what the
    hand-made induction head of the tests would predict)."""
    classes = []
    for t in range(len(row) - 1):
        last = tuple(row[t - key + 1 : t + 1]) if t + 1 >= key else None
        match = None
        if last is not None:
            match = next(
                (j for j in range(t - 1, key - 2, -1) if tuple(row[j - key + 1 : j + 1]) == last),
                None,
            )
        if match is None:
            classes.append("new")
        else:
            classes.append("repeat right" if row[match + 1] == row[t + 1] else "repeat wrong")
    return classes


def val_windows(n: int = 600, length: int = 128) -> list[bytes]:
    """The first n whole windows of length + 1 bytes of the books' held-out split (inputs and the
    next byte), one after another (fewer where the split ends first)."""
    from enlace_data.sample import builtin_split

    val = builtin_split("val")
    return [val[i : i + length + 1] for i in range(0, len(val) - length, length + 1)][:n]


def bits_where(
    bits: Sequence[Sequence[float]], rows: Sequence[Sequence[int]], key: int
) -> dict[str, tuple[float, float]]:
    """{class: (share of the positions, mean bits)} of `repeat_classes`, from each row's bits on
    its next bytes (`bits[i][t]`: on rows[i][t + 1])."""
    sums = {c: [0.0, 0] for c in REPEAT_CLASSES}
    for row, row_bits in zip(rows, bits, strict=True):
        for cls, b in zip(repeat_classes(row, key), row_bits, strict=True):
            sums[cls][0] += b
            sums[cls][1] += 1
    total = sum(int(n) for _, n in sums.values())
    return {c: (n / total, b / n if n else math.nan) for c, (b, n) in sums.items()}


def model_bits(path: str, windows: Sequence[bytes]) -> list[list[float]]:
    """A byte-level run's or checkpoint's bits on each window's next bytes."""
    import torch
    import torch.nn.functional as F
    from enlace_model.checkpoint import load_model, resolve_checkpoint

    model = load_model(resolve_checkpoint(path)).eval()
    ids = torch.tensor([list(w) for w in windows])
    out: list[list[float]] = []
    with torch.no_grad():
        for part in ids.split(50):
            logits = model(part[:, :-1]).logits.float()
            nats = F.cross_entropy(logits.transpose(1, 2), part[:, 1:], reduction="none")
            out += (nats / math.log(2)).tolist()
    return out


def write_corpus(out: Path, share: float, seed: int = 0) -> tuple[int, int]:
    """train.txt with repeated sentences and the untouched val.txt; (train bytes, repeats)."""
    from enlace_data.sample import builtin_split

    rng = random.Random(seed)
    parts = SENTENCE_END.split(builtin_split("train").decode())
    kept: list[str] = []
    repeats = i = 0
    while i < len(parts):
        a = parts[i]
        kept.append(a)
        # A B A within one 128-byte window (the draw first: the corpora of CHAT.md)
        if (
            8 <= len(a) <= 60
            and rng.random() < share
            and i + 1 < len(parts)
            and len(parts[i + 1]) <= 50
        ):
            kept += [parts[i + 1], a]
            repeats += 1
            i += 1
        i += 1
    out.mkdir(parents=True, exist_ok=True)
    train = " ".join(kept).encode()
    (out / "train.txt").write_bytes(train)
    (out / "val.txt").write_bytes(builtin_split("val"))
    return len(train), repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("probe", help="copy accuracy of runs or checkpoints")
    p.add_argument("models", nargs="+")
    p.add_argument("--pairs", type=int, default=100)
    p.add_argument("--rows", type=int, default=50, help="rows of 128 bytes of records of each kind")
    w = sub.add_parser(
        "where", help="a byte-level base's bits on the books, by what a copy would do"
    )
    w.add_argument("models", nargs="+")
    w.add_argument("--key", type=int, default=4, help="bytes a repeat must match")
    w.add_argument("--windows", type=int, default=600, help="windows of 128 bytes of val")
    c = sub.add_parser("corpus", help="write a copy-heavy bytes corpus")
    c.add_argument("out", type=Path)
    c.add_argument("--share", type=float, default=1.0)
    args = parser.parse_args()
    if args.command == "corpus":
        size, repeats = write_corpus(args.out, args.share)
        print(f"{args.out}: train.txt {size:,} bytes with {repeats:,} repeated sentences")
        return
    if args.command == "where":
        windows = val_windows(args.windows)
        print(f"{'model':40} {'all':>6}  " + "  ".join(f"{c:>20}" for c in REPEAT_CLASSES))
        for path in args.models:
            bits = model_bits(path, windows)
            split = bits_where(bits, windows, args.key)
            mean = sum(map(sum, bits)) / sum(map(len, bits))
            shown = "  ".join(f"{share:6.1%} {b:6.3f} bits" for share, b in split.values())
            print(f"{path:40} {mean:6.3f}  {shown}")
        return
    pairs, rows = probe_pairs(args.pairs), record_rows(args.rows)
    print(f"{'model':60} {'first':>7} {'second':>7} {'gap':>7}  records")
    for path in args.models:
        first, second, records = probe(path, pairs, rows)
        shown = "  ".join(f"{kind} {share:.1%}" for kind, share in records.items())
        print(f"{path:60} {first:7.1%} {second:7.1%} {second - first:+7.1%}  {shown}")


if __name__ == "__main__":
    main()
