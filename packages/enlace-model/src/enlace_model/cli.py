"""`enlace-model`: developer commands on checkpoints. `export CHECKPOINT OUT_DIR` writes a Hugging
Face folder. Errors a user can fix print one paragraph and exit 2; `--debug` shows tracebacks."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="enlace-model", description=__doc__)
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = p.add_subparsers(dest="command", required=True)
    ex = sub.add_parser(
        "export",
        help="write a Hugging Face folder (Qwen3 architecture) with the tokenizer files",
        description="Export a checkpoint (or a run directory's newest complete checkpoint) as a "
        "Hugging Face folder: config.json, model.safetensors, generation_config.json, tokenizer.",
    )
    ex.add_argument("checkpoint", help="a run directory or a checkpoints/step_<N> directory")
    ex.add_argument("out_dir", help="the folder to write (new, empty, or an earlier export)")
    ex.add_argument(
        "--tokenizer",
        metavar="DIR",
        help="take the tokenizer files from DIR (`enlace-data tokenizer PATH --save DIR`) "
        "instead of the checkpoint",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from enlace_model.errors import CheckpointError
    from enlace_model.export import export_hf

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = export_hf(args.checkpoint, args.out_dir, tokenizer=args.tokenizer)
        for w in caught:
            print(f"warning: {w.message}", file=sys.stderr)
    except (CheckpointError, OSError) as e:
        if args.debug:
            raise
        print(f"enlace-model export: {e}", file=sys.stderr)
        return 2
    print(f"exported {args.checkpoint} to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
