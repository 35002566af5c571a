"""What the distributed tests launch under torchrun: `python -m enlace_train ARGS`, observed.

torchrun starts this file on every rank instead of `-m enlace_train`; it records, for the tests,
two things the trainer does not report, then runs the real entry point unchanged:

- every file-system write the rank makes (Python audit events: opening a file for writing,
  mkdir, rename/replace, remove, rmtree, truncate), to check that only rank 0 writes files;
- which training windows the rank's data loader hands out, to check that ranks read disjoint data.

The record goes to $ENLACE_TEST_AUDIT_DIR/rank_<RANK>.json when the rank exits.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from pathlib import Path
from typing import Any

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
WRITE_EVENTS = {
    "os.mkdir",
    "os.rename",
    "os.remove",
    "os.rmdir",
    "shutil.rmtree",
    "os.truncate",
    "os.symlink",
    "os.link",
}

writes: list[list[str]] = []
windows: list[dict[str, Any]] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "open":
        path, mode, flags = args
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & WRITE_FLAGS
        )
        if writing and isinstance(path, str | bytes | os.PathLike):
            writes.append([event, os.fsdecode(path)])
    elif event in WRITE_EVENTS:
        writes.append([event, *(os.fsdecode(a) for a in args if isinstance(a, str | bytes))])


def _record_windows() -> None:
    import numpy as np
    from enlace_data import loader as loader_module

    original = loader_module.Loader.__next__

    def observed(self: Any) -> Any:
        first = self.samples_consumed + self.rank * self.micro_batch_size
        positions = np.arange(first, first + self.micro_batch_size, dtype=np.int64)
        batch = original(self)
        if self.split == "train":
            ids = self.window_ids(positions).tolist()
            windows.append({"positions": positions.tolist(), "windows": ids})
        return batch

    loader_module.Loader.__next__ = observed  # type: ignore[method-assign]


def main() -> None:
    out = Path(os.environ["ENLACE_TEST_AUDIT_DIR"])
    rank = os.environ.get("RANK", "0")
    _record_windows()
    sys.addaudithook(_audit)
    code: int | str | None = 0
    try:
        sys.argv = ["enlace_train", *sys.argv[1:]]
        runpy.run_module("enlace_train", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
    finally:
        record = {"rank": int(rank), "writes": writes, "windows": windows}
        (out / f"rank_{rank}.json").write_text(json.dumps(record), encoding="utf-8")
    sys.exit(code)


if __name__ == "__main__":
    main()
