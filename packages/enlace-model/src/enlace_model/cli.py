"""`enlace-model`: developer commands on checkpoints. `export CHECKPOINT OUT` writes a Hugging Face
folder, or with `--format gguf` one GGUF file for llama.cpp. Errors a user can fix print one
paragraph and exit 2; `--debug` shows tracebacks."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence

from enlace_model.gguf_export import GGUF_TYPES  # the package's __init__ has imported torch anyway


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="enlace-model", description=__doc__)
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = p.add_subparsers(dest="command", required=True)
    ex = sub.add_parser(
        "export",
        help="write a Hugging Face folder (Qwen3 architecture) or a GGUF file for llama.cpp",
        description="Export a checkpoint (or a run directory's newest complete checkpoint) as a "
        "Hugging Face folder (config.json, model.safetensors, generation_config.json, tokenizer, "
        "README.md model card) or, with --format gguf, as one GGUF file that llama.cpp runs.",
    )
    ex.add_argument("checkpoint", help="a run directory or a checkpoints/step_<N> directory")
    ex.add_argument(
        "out", help="hf: the folder to write (new, empty, or an earlier export); gguf: the file"
    )
    ex.add_argument("--format", choices=("hf", "gguf"), default="hf", help="default: hf")
    ex.add_argument(
        "--type",
        choices=GGUF_TYPES,
        default="f16",
        help="gguf only: weight type (q8_0 for a home server; q4_0 is 4-bit). Default: f16",
    )
    ex.add_argument(
        "--tokenizer",
        metavar="DIR",
        help="hf only: take the tokenizer files from DIR (`enlace-data tokenizer PATH --save DIR`) "
        "instead of the checkpoint",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.format == "gguf" and args.tokenizer is not None:
        parser.error("--tokenizer is for --format hf; the GGUF export reads the checkpoint's files")
    from enlace_model.errors import CheckpointError

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if args.format == "gguf":
                from enlace_model.gguf_export import export_gguf

                out = export_gguf(args.checkpoint, args.out, outtype=args.type)
            else:
                from enlace_model.export import export_hf

                out = export_hf(args.checkpoint, args.out, tokenizer=args.tokenizer)
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
