"""`enlace-train CONFIG [key=value ...]` and the verbs of USAGE below (`sample`, `chat`, `eval`,
`eval-chat`, `report`, `lm-eval`).

Thin on purpose: the config is composed and validated before torch is imported (a bad config exits 2
in a fraction of a second), then the trainer does the work. Errors the user can act on print one
paragraph and exit 2; `--debug` shows the traceback.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from enlace_config.contracts import DEBUG_HELP

USAGE = """\
enlace-train CONFIG [KEY=VALUE ...] [--debug]     train (or resume) the run CONFIG describes
enlace-train sample RUN_DIR --prompt TEXT [...]  continue TEXT with a run's newest checkpoint
enlace-train chat RUN_OR_CHECKPOINT [...]        talk to a chat (SFT) model in the terminal
enlace-train eval RUN_OR_CHECKPOINT FILE... [...] bits per byte of a model on UTF-8 text files
enlace-train eval-chat RUN_OR_CHECKPOINT DATA    chat measures on held-out conversations
enlace-train report RUN_DIR... [--out DIR]       a Markdown page and plots of one or more runs
enlace-train lm-eval MODEL [--tasks ...]         Spanish benchmarks (lm-eval) on the HF export"""

EXIT_BAD_INPUT = 2
# The developer command lines' shared words (tests/test_cli_help.py holds them to it).


def _fail(message: str, exc: BaseException | None, debug: bool, code: int = EXIT_BAD_INPUT) -> int:
    if debug and exc is not None:
        traceback.print_exception(exc)
    print(f"enlace-train: error: {message}", file=sys.stderr)
    return code


def _missing_extra(exc: ModuleNotFoundError, extra: str, debug: bool) -> int:
    return _fail(
        f"{exc.name} is not installed: this command needs the optional dependency "
        f"(pip install 'enlace-train[{extra}]', or uv sync --extra {extra})",
        exc,
        debug,
    )


def _write_json(path: str, data: object) -> None:
    import json

    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)


def _json_out(path: str | None, data: object) -> None:
    """A verb's JSON result: written to `path` (--json), else printed on one line."""
    import json

    if path:
        _write_json(path, data)
    else:
        print(json.dumps(data))


def _parser(prog: str, description: str | None, example: str, **kw: Any) -> argparse.ArgumentParser:
    """A command's parser: `--debug`, and its help ending with `example` (one command line per
    line; the description is written with its own line breaks)."""
    p = argparse.ArgumentParser(
        prog=prog,
        description=description,
        epilog=f"example{'s' if chr(10) in example else ''}:\n  " + example.replace("\n", "\n  "),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        **kw,
    )
    p.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    return p


def _train_parser() -> argparse.ArgumentParser:
    example = "enlace-train configs/runs/smoke-cpu.yaml train.max_steps=100"
    p = _parser("enlace-train", __doc__, example, usage=USAGE)
    p.add_argument("config", metavar="CONFIG", help="a run file, e.g. configs/runs/smoke-cpu.yaml")
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="overrides, e.g. train.max_steps=100",
    )
    return p


def _number(
    kind: type[int] | type[float], low: float, high: float = math.inf, *, open_low: bool = False
):
    """An argparse type: a finite `kind` in [low, high] ((low, high] with open_low)."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {kind.__name__}") from None
        below = value <= low if open_low else value < low
        if not math.isfinite(value) or below or value > high:
            bounds = f"{'(' if open_low else '['}{low:g}, {high:g}]"
            raise argparse.ArgumentTypeError(f"{text!r} is not a number in {bounds}")
        return value

    return parse


def _output_file(text: str) -> str:
    """An argparse type: a file to write, in a folder that exists, so that a typo fails at once
    (exit 2) and not with a traceback after the work it was to hold."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder, not a file")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(
            f"{text!r}: the folder {str(path.parent)!r} does not exist"
        )
    return text


def _sampling_options(
    p: argparse.ArgumentParser,
    *,
    max_new_tokens: int,
    temperature: float,
    top_p: float | None,
    seed: int | None,
) -> None:
    """The generation options `sample` and `chat` share, with each command's defaults."""
    p.add_argument("--max-new-tokens", type=_number(int, 1), default=max_new_tokens)
    p.add_argument(
        "--temperature", type=_number(float, 0), default=temperature, help="0 for greedy decoding"
    )
    p.add_argument("--top-p", type=_number(float, 0, 1, open_low=True), default=top_p)
    p.add_argument("--seed", type=int, default=seed, help="sampling seed (same seed, same output)")


def _sample_parser() -> argparse.ArgumentParser:
    p = _parser(
        "enlace-train sample",
        "Sample text from a run's newest checkpoint (or a checkpoint directory).",
        "enlace-train sample runs/smoke-cpu --prompt 'Había una vez'",
    )
    p.add_argument(
        "run_dir", metavar="RUN_DIR", help="a run directory (runs/NAME) or one checkpoint directory"
    )
    p.add_argument("--prompt", required=True, metavar="TEXT", help="text to continue")
    _sampling_options(p, max_new_tokens=200, temperature=0.8, top_p=None, seed=1337)
    p.add_argument("--top-k", type=_number(int, 1), default=None)
    return p


def _chat_parser() -> argparse.ArgumentParser:
    p = _parser(
        "enlace-train chat",
        "Talk to a chat model (a chat run's newest checkpoint, or a checkpoint directory):\n"
        "streamed replies, history, /reset, /salir.",
        "enlace-train chat runs/sft-cpu --system 'Eres Enlace, el asistente de la familia.'",
    )
    p.add_argument(
        "checkpoint",
        metavar="RUN_OR_CHECKPOINT",
        help="a run directory (runs/NAME) or one checkpoint directory",
    )
    p.add_argument(
        "--system", default=None, metavar="TEXT", help="a system prompt for the conversation"
    )
    _sampling_options(p, max_new_tokens=256, temperature=0.7, top_p=0.9, seed=None)
    return p


def _eval_parser() -> argparse.ArgumentParser:
    p = _parser(
        "enlace-train eval",
        "Bits per byte of a model on UTF-8 text files, scored with a sliding window (every byte\n"
        "once; enlace_train/evaluate_text.py documents the rules). Prints one line, then the\n"
        "result as JSON (or writes it to --json).",
        "enlace-train eval runs/smoke-cpu data/smoke/val.txt --json eval.json",
    )
    p.add_argument(
        "model",
        metavar="RUN_OR_CHECKPOINT",
        help="a run directory, a checkpoint directory or an exported folder",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="UTF-8 text files")
    p.add_argument("--window", type=int, default=None, help="tokens per window (default: context)")
    p.add_argument(
        "--stride", type=int, default=None, help="tokens between windows (default: window/2)"
    )
    p.add_argument("--batch-size", type=int, default=8, help="windows per forward pass")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument(
        "--json", type=_output_file, default=None, metavar="FILE",
        help="write the JSON result here instead of stdout",
    )  # fmt: skip
    return p


def chat_cli(argv: Sequence[str]) -> int:
    ns = _chat_parser().parse_args(list(argv))
    try:
        from enlace_train.chat import chat_main

        chat_main(ns)
    except (FileNotFoundError, ValueError) as exc:  # DataError, missing or corrupt checkpoints
        return _fail(str(exc), exc, ns.debug)
    except KeyboardInterrupt:
        print()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    verbs = {"sample": sample_main, "chat": chat_cli, "eval": eval_main}
    verbs |= {"eval-chat": eval_chat_main, "report": report_main, "lm-eval": lm_eval_main}
    if args and args[0] in verbs:
        return verbs[args[0]](args[1:])
    ns = _train_parser().parse_args(args)
    return train_main(ns.config, ns.overrides, debug=ns.debug)


def train_main(config: str, overrides: Sequence[str], *, debug: bool = False) -> int:
    from enlace_config import ConfigError, load_run_config

    try:
        resolved = load_run_config(config, list(overrides))
    except ConfigError as exc:
        return _fail(str(exc), exc, debug)

    hardware = resolved.config.hardware
    if hardware.device == "cpu" and not {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"} & os.environ.keys():
        # Read once by libgomp when torch loads, so set here, before the import. Threads that spin
        # long while waiting collapse when other jobs share the cores (OpenMP's default 300,000:
        # 136 tok/s vs 3,535 sleeping, measured under load); sleeping at once costs a quiet
        # machine ~1.4x a step: hardware/cpu.yaml's short spin sits between
        # (benchmarks/bench_cpu_wait.py). A value the user exported wins.
        os.environ["GOMP_SPINCOUNT"] = str(hardware.openmp_spin_count)

    # Only now the heavy imports: a bad config never waits for torch.
    from enlace_data import DataError

    from enlace_train.errors import TrainError
    from enlace_train.trainer import final_line, train

    try:
        summary = train(resolved)
    except (TrainError, DataError, ConfigError) as exc:
        return _fail(str(exc), exc, debug)
    except KeyboardInterrupt as exc:
        return _fail(
            "interrupted; the last complete checkpoint is kept (rerun to resume)", exc, debug, 130
        )
    except Exception as exc:  # a bug, not bad input: say so, and how to see the traceback
        return _fail(
            f"{type(exc).__name__}: {exc} (rerun with --debug for the traceback)", exc, debug, 1
        )
    if summary.final_val_bpb is not None and os.environ.get("RANK", "0") == "0":  # torchrun: once
        print(final_line(summary))
    return 0


def sample_main(argv: Sequence[str]) -> int:
    ns = _sample_parser().parse_args(list(argv))
    try:
        from enlace_train.sample import sample_text

        text = sample_text(
            ns.run_dir,
            ns.prompt,
            max_new_tokens=ns.max_new_tokens,
            temperature=ns.temperature,
            top_k=ns.top_k,
            top_p=ns.top_p,
            seed=ns.seed,
        )
    except (FileNotFoundError, ValueError) as exc:  # DataError, missing or corrupt checkpoints
        return _fail(str(exc), exc, ns.debug)
    print(text)
    return 0


def eval_main(argv: Sequence[str]) -> int:
    ns = _eval_parser().parse_args(list(argv))
    try:
        from tqdm import tqdm

        from enlace_train.evaluate_text import evaluate_checkpoint

        bar = tqdm(unit="window", file=sys.stderr, disable=None)

        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        score, checkpoint = evaluate_checkpoint(
            ns.model,
            ns.files,
            window=ns.window,
            stride=ns.stride,
            batch_size=ns.batch_size,
            device=ns.device,
            dtype=ns.dtype,
            progress=progress,
        )
        bar.close()
    except (FileNotFoundError, ValueError, UnicodeDecodeError) as exc:  # also CheckpointError
        return _fail(str(exc), exc, ns.debug)
    print(
        f"bits/byte {score.bits_per_byte:.4f} on {len(score.files)} file(s), {score.bytes} bytes, "
        f"{score.tokens} tokens (window {score.window}, stride {score.stride}) | {checkpoint}"
    )
    _json_out(ns.json, {"checkpoint": str(checkpoint), **score.to_dict()})
    return 0


def eval_chat_main(argv: Sequence[str]) -> int:
    p = _parser(
        "enlace-train eval-chat",
        "The chat measures of a model on held-out conversations (enlace_train/chat_eval.py\n"
        "defines them): turn endings, well-formed tool calls, argument fidelity (the search names\n"
        "the question's entities), grounded answers and invention after a tool result, spurious\n"
        "calls. Prints one line, then the result as JSON (or writes it to --json); --misses\n"
        "writes each failed prompt of fidelity, memory and grounded (question, expected, reply).",
        "enlace-train eval-chat runs/sft-cpu builtin --conversations 50",
    )
    p.add_argument(
        "model",
        metavar="RUN_OR_CHECKPOINT",
        help="a run directory, a checkpoint directory or an exported folder",
    )
    p.add_argument(
        "data",
        metavar="DATA",
        help="a chat data directory (its val split), a .jsonl/.parquet file of conversations, or "
        "builtin (the built-in set's val split)",
    )
    p.add_argument(
        "--conversations", type=_number(int, 1), default=None,
        help="held-out conversations to replay (default: data.chat_eval_conversations)",
    )  # fmt: skip
    p.add_argument(
        "--max-tokens", type=_number(int, 1), default=None,
        help="most tokens per reply (default: data.chat_eval_max_tokens)",
    )  # fmt: skip
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument(
        "--json", type=_output_file, default=None, metavar="FILE",
        help="write the JSON result here instead of stdout",
    )  # fmt: skip
    p.add_argument(
        "--misses", type=_output_file, default=None, metavar="FILE",
        help="write the failed prompts here, one JSON object a line",
    )  # fmt: skip
    ns = p.parse_args(list(argv))
    try:
        from enlace_train.chat_eval import eval_checkpoint

        result, checkpoint = eval_checkpoint(
            ns.model,
            ns.data,
            conversations=ns.conversations,
            max_tokens=ns.max_tokens,
            device=ns.device,
        )
    except (FileNotFoundError, ValueError) as exc:  # CheckpointError, DataError
        return _fail(str(exc), exc, ns.debug)
    print(f"chat: {result.line()} | {checkpoint}")
    _json_out(ns.json, {"checkpoint": str(checkpoint), **result.row()})
    if ns.misses:
        import json

        with open(ns.misses, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(m, ensure_ascii=False) + "\n" for m in result.misses)
    return 0


def report_main(argv: Sequence[str]) -> int:
    p = _parser(
        "enlace-train report",
        "Write report.md, PNG plots (loss, validation bits/byte, lr, gradient norm, tokens/s\n"
        "against tokens seen; one line per run) and report.json for run directories.",
        "enlace-train report runs/smoke-cpu runs/sft-cpu --out report",
    )
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories (runs/NAME)")
    p.add_argument(
        "--out", default=None, metavar="DIR", help="report folder (default: FIRST_RUN/report)"
    )
    ns = p.parse_args(list(argv))
    try:
        from enlace_train.report import write_report

        page = write_report(ns.runs, ns.out or f"{ns.runs[0]}/report")
    except ModuleNotFoundError as exc:
        return _missing_extra(exc, "report", ns.debug)
    except ValueError as exc:  # ReportError
        return _fail(str(exc), exc, ns.debug)
    print(f"report: {page}")
    return 0


def lm_eval_main(argv: Sequence[str]) -> int:
    from enlace_train.harness import SPANISH_TASKS

    p = _parser(
        "enlace-train lm-eval",
        "Spanish benchmarks through EleutherAI's lm-eval on the Hugging Face export (a run or\n"
        "checkpoint is exported first). Needs enlace-train[lm-eval] and the Hub.",
        "enlace-train lm-eval runs/NAME --tasks xnli_es,copa_es --limit 100",
    )
    p.add_argument(
        "model", metavar="MODEL", help="a run directory, a checkpoint or an exported folder"
    )
    p.add_argument(
        "--tasks",
        default=",".join(SPANISH_TASKS),
        metavar="TASKS",
        help="comma-separated task names",
    )
    p.add_argument(
        "--include", default=None, metavar="DIR", help="a folder of extra task YAML files"
    )
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--limit", type=int, default=None, help="examples per task (a quick look)")
    p.add_argument(
        "--json", type=_output_file, default=None, metavar="FILE", help="write the results here too"
    )
    ns = p.parse_args(list(argv))
    try:
        from enlace_train.harness import run_lm_eval

        result = run_lm_eval(
            ns.model,
            [t for t in ns.tasks.split(",") if t],
            include=ns.include,
            device=ns.device,
            dtype=ns.dtype,
            batch_size=ns.batch_size,
            limit=ns.limit,
        )
    except ModuleNotFoundError as exc:
        return _missing_extra(exc, "lm-eval", ns.debug)
    except (FileNotFoundError, ValueError) as exc:  # CheckpointError, unknown tasks
        return _fail(str(exc), exc, ns.debug)
    for task, metrics in result.get("results", {}).items():
        shown = ", ".join(f"{k} {v:.4f}" for k, v in metrics.items())
        print(f"{task}: {shown}")
    if ns.json:
        _write_json(ns.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
