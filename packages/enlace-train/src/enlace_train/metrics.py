"""What a run tells its user: metrics.jsonl, the train.log lines, and a progress line for tmux."""

from __future__ import annotations

import json
import logging
import math
import sys
from pathlib import Path
from typing import Any, TextIO

METRICS_FILE = "metrics.jsonl"
LOG_FILE = "train.log"

log = logging.getLogger("enlace_train")


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The rows of a metrics.jsonl; a torn last line (a kill mid-write) is dropped."""
    if not path.exists():
        return []
    rows: list[dict[str, Any]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def truncate_metrics(path: Path, step: int) -> int:
    """Keep only rows with step <= `step` (what a resumed run has already done); returns rows kept."""
    from enlace_data._fs import write_atomic  # the workspace's atomic write, below this package

    rows = [r for r in read_metrics(path) if int(r.get("step", 0)) <= step]
    write_atomic({path: "".join(json.dumps(row) + "\n" for row in rows).encode()})
    return len(rows)


class MetricsWriter:
    """Appends one JSON object per line and flushes it: a kill loses at most the line being written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: TextIO = path.open("a", encoding="utf-8")

    def write(self, row: dict[str, Any]) -> None:
        clean = {
            k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in row.items()
        }
        self._file.write(json.dumps(clean) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class Progress:
    """A single status line rewritten in place (carriage return) when stderr is a terminal, as in
    tmux; nothing when it is not, so log files stay clean."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.active = self.stream.isatty()
        self._width = 0

    def update(self, text: str) -> None:
        if not self.active:
            return
        pad = max(0, self._width - len(text))
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()
        self._width = len(text)

    def clear(self) -> None:
        if self.active and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0


class _ProgressAwareHandler(logging.StreamHandler):  # type: ignore[type-arg]
    def __init__(self, progress: Progress) -> None:
        super().__init__(sys.stdout)
        self.progress = progress

    def emit(self, record: logging.LogRecord) -> None:
        self.progress.clear()
        super().emit(record)


def setup_logging(run_dir: Path | None, progress: Progress) -> None:
    """Log lines go to stdout and to RUN_DIR/train.log (appended across resumes)."""
    log.setLevel(logging.INFO)
    log.propagate = False
    close_logging()
    console = _ProgressAwareHandler(progress)
    console.setFormatter(logging.Formatter("%(message)s"))
    log.addHandler(console)
    if run_dir is not None:
        file_handler = logging.FileHandler(run_dir / LOG_FILE, encoding="utf-8")
        file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(file_handler)


def close_logging() -> None:
    for handler in list(log.handlers):
        log.removeHandler(handler)
        handler.close()


def format_duration(seconds: float) -> str:
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"
