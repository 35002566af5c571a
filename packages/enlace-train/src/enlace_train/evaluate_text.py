"""Bits per byte of a model on any UTF-8 text: the figure that compares across tokenizers.

`enlace-train eval` and the trainer's held-out text evaluation both call `score_text`: the model's
total negative log-likelihood of the scored tokens, in bits, over the UTF-8 bytes they spell.

Sliding window. A file is tokenized whole; if the tokenizer has a beginning-of-text token the
model's vocabulary holds, it is put first, so every token of the text is scored; otherwise (a
256-byte model) the first token is context only and its byte is not counted. Windows of `window`
tokens start every `stride` tokens; the first scores all its predictions, each later one only its
last `stride`, the ones no earlier window covered. So every token is scored exactly once, with at
least `window - stride + 1` tokens of left context (except in the first window). stride = window
is fastest with the least context; stride 1 gives every token a full window at one forward pass
per token; the default, window / 2, is the usual middle. Deterministic (sums in float64).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

BOS_NAMES = ("<|endoftext|>", "<s>", "<bos>")


@dataclass(frozen=True)
class Window:
    """One forward pass: tokens [begin, end) in, the predictions from offset `first` on scored."""

    begin: int
    end: int
    first: int


def windows(n_tokens: int, window: int, stride: int) -> list[Window]:
    """The windows that score tokens 1..n_tokens-1 once each (module docstring)."""
    if not 1 <= stride <= window:
        raise ValueError(f"stride must be between 1 and the window ({window}), not {stride}")
    out: list[Window] = []
    begin, scored_to = 0, 0  # scored_to: last target index scored so far
    while scored_to < n_tokens - 1:
        end = min(begin + window, n_tokens - 1)  # inputs t[begin:end] predict t[begin+1:end+1]
        out.append(Window(begin, end, scored_to - begin))
        scored_to = end
        begin += stride
    return out


@dataclass
class FileScore:
    path: str
    bytes: int
    tokens: int
    bits: float

    @property
    def bits_per_byte(self) -> float:
        return self.bits / self.bytes if self.bytes else math.nan


@dataclass
class TextScore:
    """The result: totals over all files, and each file's own figure."""

    window: int
    stride: int
    files: list[FileScore] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    @property
    def tokens(self) -> int:
        return sum(f.tokens for f in self.files)

    @property
    def bits_per_byte(self) -> float:
        return sum(f.bits for f in self.files) / (self.bytes or math.nan)

    @property
    def bits_per_token(self) -> float:
        return sum(f.bits for f in self.files) / (self.tokens or math.nan)

    def to_dict(self) -> dict[str, Any]:
        return {
            "bits_per_byte": self.bits_per_byte,
            "bits_per_token": self.bits_per_token,
            "bytes": self.bytes,
            "tokens": self.tokens,
            "window": self.window,
            "stride": self.stride,
            "files": [{**asdict(f), "bits_per_byte": f.bits_per_byte} for f in self.files],
        }


@torch.no_grad()
def _bits(
    model: torch.nn.Module,
    ids: torch.Tensor,
    spans: Sequence[Window],
    window: int,
    autocast: Callable[[], Any],
) -> float:
    """Total bits of the scored predictions of `spans` (one batch) of the token tensor `ids`."""
    device = next(model.parameters()).device
    x = torch.zeros((len(spans), window), dtype=torch.long)
    y = torch.full((len(spans), window), -1, dtype=torch.long)
    for row, w in enumerate(spans):
        n = w.end - w.begin
        x[row, :n] = ids[w.begin : w.end]
        y[row, w.first : n] = ids[w.begin + 1 + w.first : w.end + 1]
    x, y = x.to(device), y.to(device)
    with autocast():
        logits = model(x).logits  # (B, T, V)
    nats = F.cross_entropy(
        logits.float().flatten(0, 1), y.flatten(), ignore_index=-1, reduction="none"
    )  # (B*T,), 0 where ignored
    return float(nats.double().sum()) / math.log(2)  # summed in float64


def _tokens(tokenizer: Any, path: str | Path, vocab: int | None) -> tuple[torch.Tensor, int]:
    """A file's token ids (the start token first, when the tokenizer has one) and the UTF-8 bytes
    its scored tokens spell."""
    text = Path(path).read_text(encoding="utf-8")
    ids = tokenizer.encode(text)
    n_bytes = len(text.encode("utf-8"))
    bos = next((tokenizer.special_ids[n] for n in BOS_NAMES if n in tokenizer.special_ids), None)
    if bos is not None and (vocab is None or bos < vocab):
        ids = [bos, *ids]
    elif ids:  # no start token the model knows (a 256-byte model): the first byte is context only
        n_bytes -= 1
    return torch.tensor(ids, dtype=torch.long), n_bytes


def score_text(
    model: torch.nn.Module,
    tokenizer: Any,
    paths: Sequence[str | Path],
    *,
    window: int,
    stride: int,
    batch_size: int,
    autocast: Callable[[], Any] = nullcontext,
    progress: Callable[[int, int], None] | None = None,
) -> TextScore:
    """Bits per byte of `model` on the UTF-8 files `paths` (module docstring for the rules).
    `progress(done, total)` is called after each batch, counting windows."""
    vocab = getattr(getattr(model, "cfg", None), "vocab_size", None)
    files = [(str(p), *_tokens(tokenizer, p, vocab)) for p in paths]
    plans = [windows(len(ids), window, stride) for _, ids, _ in files]
    total, done = sum(len(p) for p in plans), 0
    result = TextScore(window=window, stride=stride)
    was_training = model.training
    model.eval()
    try:
        for (path, ids, n_bytes), spans in zip(files, plans, strict=True):
            bits = 0.0
            for i in range(0, len(spans), batch_size):
                batch = spans[i : i + batch_size]
                bits += _bits(model, ids, batch, window, autocast)
                done += len(batch)
                if progress is not None:
                    progress(done, total)
            result.files.append(FileScore(path, n_bytes, max(len(ids) - 1, 0), bits))
    finally:
        model.train(was_training)
    return result


def evaluate_checkpoint(
    path: str,
    files: Sequence[str],
    *,
    window: int | None = None,
    stride: int | None = None,
    batch_size: int = 8,
    device: str = "cpu",
    dtype: str = "float32",
    progress: Callable[[int, int], None] | None = None,
) -> tuple[TextScore, Path]:
    """`enlace-train eval`: load a run's newest checkpoint (or a checkpoint, or an export) and its
    tokenizer, and score `files`. window defaults to the model's context, stride to window // 2."""
    from enlace_data.tokenizer import load_tokenizer
    from enlace_model.checkpoint import load_model, resolve_checkpoint

    checkpoint = resolve_checkpoint(path)
    model = load_model(checkpoint, device=device, dtype=torch.float32)
    tokenizer = load_tokenizer(checkpoint)
    context = model.cfg.context_length
    window = window or context
    if window > context:
        raise ValueError(f"--window {window} exceeds the model's context_length {context}")
    stride = stride or max(window // 2, 1)
    amp = {"float32": None, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    autocast = partial(torch.autocast, torch.device(device).type, amp) if amp else nullcontext
    score = score_text(
        model,
        tokenizer,
        files,
        window=window,
        stride=stride,
        batch_size=batch_size,
        autocast=autocast,
        progress=progress,
    )
    return score, checkpoint


def held_out_text(
    cfg: Any, autocast: Callable[[], Any]
) -> Callable[[torch.nn.Module], float] | None:
    """The trainer's hook: a function scoring `cfg.data.eval_text_files` in bits per byte (window =
    the training context, batches of one micro-batch), or None when no files are configured.
    Missing or non-UTF-8 files fail here, at start-up, not at the first evaluation."""
    from enlace_data.tokenizer import ByteTokenizer, load_tokenizer

    from enlace_train.errors import SetupError

    data, files = cfg.data, cfg.data.eval_text_files
    if not files:
        return None
    for path in files:
        try:
            Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SetupError(
                f"data.eval_text_files: {path} is not a readable UTF-8 file ({exc})"
            ) from exc
    tokenizer = ByteTokenizer() if data.kind == "bytes" else load_tokenizer(data.path)
    window = data.context_length
    stride = data.eval_text_stride or max(window // 2, 1)

    def score(model: torch.nn.Module) -> float:
        return score_text(
            model,
            tokenizer,
            files,
            window=window,
            stride=stride,
            batch_size=cfg.hardware.micro_batch_size,
            autocast=autocast,
        ).bits_per_byte

    return score
