"""`enlace-model`: developer commands on checkpoints. `export CHECKPOINT OUT` writes a Hugging Face
folder, or with `--format gguf` one GGUF file for llama.cpp. Errors a user can fix print one
paragraph and exit 2; `--debug` shows tracebacks."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence

from enlace_config.contracts import DEBUG_HELP

from enlace_model.gguf_export import GGUF_TYPES  # the package's __init__ has imported torch anyway

# The developer command lines' shared words (tests/test_cli_help.py holds them to it).
RAW = argparse.RawDescriptionHelpFormatter


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="enlace-model",
        description=__doc__,
        formatter_class=RAW,
        epilog="example:\n  enlace-model export runs/smoke-cpu exports/smoke-cpu",
    )
    p.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    # --debug is also accepted after the command (`enlace-model export RUN OUT --debug`)
    debug = argparse.ArgumentParser(add_help=False)
    debug.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    ex = sub.add_parser(
        "export",
        parents=[debug],
        formatter_class=RAW,
        help="write a Hugging Face folder (Qwen3 architecture) or a GGUF file for llama.cpp",
        description="Export a checkpoint (or a run directory's newest complete checkpoint) as a\n"
        "Hugging Face folder (config.json, model.safetensors, generation_config.json, tokenizer,\n"
        "README.md model card) or, with --format gguf, as one GGUF file that llama.cpp runs.",
        epilog="examples:\n"
        "  enlace-model export runs/smoke-cpu exports/smoke-cpu\n"
        "  enlace-model export runs/smoke-cpu smoke-cpu.gguf --format gguf --type q8_0",
    )
    ex.add_argument(
        "checkpoint",
        metavar="CHECKPOINT",
        help="a run directory or a checkpoints/step_<N> directory",
    )
    ex.add_argument(
        "out",
        metavar="OUT",
        help="hf: the folder to write (new, empty, or an earlier export); gguf: the file",
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
