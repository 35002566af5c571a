"""`enlace-train report RUN... [--out DIR]`: one page that says what a run did, with its pictures.

Reads what a run directory already holds (config.yaml, metrics.jsonl, train.log) and writes:
- report.md: per run the configuration summary, the board it ran on, tokens seen, time, throughput,
  MFU, peak memory, final and best figures; then the plots;
- loss.png, val_bpb.png, lr.png, grad_norm.png, tokens_per_s.png: each against tokens seen, one line
  per run, so several runs (a 2060 run and a 5090 run, two checkpoints' runs) compare on one plot;
  chat.png for chat runs: the held-out chat measures (enlace_train/chat_eval.py) together;
- report.json: the same figures and, per plot, the series drawn (run, points), for scripts.

matplotlib is an optional dependency (`enlace-train[report]`), imported only here.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from enlace_train.metrics import LOG_FILE, METRICS_FILE, read_metrics

# file name -> (title, y label, the metric rows' key, log scale)
PLOTS: dict[str, tuple[str, str, str, bool]] = {
    "loss.png": ("Training loss", "loss (nats/token)", "loss", False),
    "val_bpb.png": ("Validation bits per byte", "bits/byte", "val_bpb", False),
    "lr.png": ("Learning rate", "lr", "lr", False),
    "grad_norm.png": ("Gradient norm (before clipping)", "grad norm", "grad_norm", True),
    "tokens_per_s.png": ("Throughput", "tokens/s", "tokens_per_s", False),
}
TEXT_BPB = "val_text_bpb"  # held-out text files, when the run evaluates them (eval_text_files)
# The chat measures of a chat (SFT) run (enlace_train/chat_eval.py), drawn together on chat.png.
CHAT = {
    "chat_turn_end": "turn endings",
    "chat_tool_call": "well-formed tool calls",
    "chat_argument_fidelity": "argument fidelity",
    "chat_grounded": "grounded answers",
    "chat_invention": "invention",
    "chat_spurious_calls": "spurious calls",
    "chat_no_search_calls": "calls on no-search prompts",
    "chat_memory_fidelity": "memory fidelity",
    "chat_spurious_memory_writes": "spurious memory writes",
}


class ReportError(ValueError):
    """A run directory the report cannot read (named, with what is missing)."""


@dataclass
class Run:
    name: str
    path: Path
    config: dict[str, Any]
    rows: list[dict[str, Any]]
    board: str | None

    def series(self, key: str) -> tuple[list[float], list[float]]:
        """(tokens seen, value) for every row that has `key` (validation rows get their tokens from
        the step: every step is the same number of tokens)."""
        per_step = next(
            (r["tokens_seen"] / r["step"] for r in self.rows if r.get("tokens_seen")), 0
        )
        points = [(r["step"] * per_step, r[key]) for r in self.rows if r.get(key) is not None]
        return [p[0] for p in points], [p[1] for p in points]


def _config(path: Path) -> dict[str, Any]:
    """The run's resolved config as plain data ({} when absent or no longer valid)."""
    from enlace_config import ConfigError, load_run_config

    if not path.is_file():
        return {}
    try:
        return load_run_config(path).config.model_dump(mode="json")
    except ConfigError:
        return {}


def read_run(path: str | Path) -> Run:
    p = Path(path)
    if not (p / METRICS_FILE).is_file():
        raise ReportError(f"{p}: no {METRICS_FILE} here; give a run directory (runs/NAME)")
    rows = read_metrics(p / METRICS_FILE)
    config = _config(p / "config.yaml")
    board = None
    log_file = p / LOG_FILE
    if log_file.exists():  # the trainer's start-up line: "run NAME -> DIR | BOARD; profile ..."
        for line in log_file.read_text(encoding="utf-8", errors="replace").splitlines():
            if " -> " in line and " | " in line and "run " in line:
                board = line.split(" | ", 1)[1].strip()
    name = (config.get("run") or {}).get("name") or p.name
    return Run(name, p, config, rows, board)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def figures(run: Run) -> dict[str, Any]:
    """The numbers the page states for one run."""
    train = [r for r in run.rows if "loss" in r]
    val = [r for r in run.rows if r.get("val_bpb") is not None]
    last = train[-1] if train else {}
    text = [r[TEXT_BPB] for r in run.rows if r.get(TEXT_BPB) is not None]
    return {
        "steps": last.get("step"),
        "tokens_seen": last.get("tokens_seen"),
        "elapsed_s": last.get("elapsed_s"),
        "tokens_per_s_median": _median([r["tokens_per_s"] for r in train if "tokens_per_s" in r]),
        "mfu_median": _median([r["mfu"] for r in train if r.get("mfu") is not None]),
        "peak_mem_mb": max((r.get("peak_mem_mb") or 0 for r in train), default=None),
        "final_loss": last.get("loss"),
        "final_val_loss": val[-1]["val_loss"] if val else None,
        "final_val_bpb": val[-1]["val_bpb"] if val else None,
        "best_val_bpb": min(r["val_bpb"] for r in val) if val else None,
        "final_val_text_bpb": text[-1] if text else None,
        "best_val_text_bpb": min(text) if text else None,
        "chat": _last_chat(run),
    }


def _last_chat(run: Run) -> dict[str, float | None]:
    """The chat measures of the run's last chat evaluation ({} when it has none)."""
    rows = [r for r in run.rows if "chat_turn_end" in r]
    return {key: rows[-1].get(key) for key in CHAT} if rows else {}


def _fmt(value: Any, spec: str = "") -> str:
    if value is None:
        return "n/a"
    return format(value, spec) if spec else str(value)


def summary_lines(run: Run, f: dict[str, Any]) -> list[str]:
    c = run.config
    m, t, h, d = (c.get(k) or {} for k in ("model", "train", "hardware", "data"))
    return [
        f"## {run.name}",
        "",
        f"- run directory: `{run.path}`",
        f"- board: {run.board or 'n/a (no train.log)'}",
        f"- hardware profile: {h.get('name')} ({h.get('device')}, {h.get('dtype')}, attention "
        f"{h.get('attention')}, micro-batch {h.get('micro_batch_size')}, compile {h.get('compile')})",
        f"- model: vocab {m.get('vocab_size')}, context {m.get('context_length')}, d_model "
        f"{m.get('d_model')}, {m.get('n_layers')} layers, {m.get('n_heads')} heads "
        f"({m.get('n_kv_heads')} key/value)",
        f"- data: {d.get('kind')} from `{d.get('path')}`, context {d.get('context_length')}",
        f"- schedule: {t.get('max_steps')} steps x {t.get('global_batch_size')} sequences, lr "
        f"{t.get('lr')} -> {t.get('min_lr')} (warmup {t.get('warmup_steps')}, {t.get('decay_shape')} "
        f"decay over {t.get('decay_steps')}), seed {t.get('seed')}",
        "",
        "| figure | value |",
        "|---|---|",
        f"| steps | {_fmt(f['steps'])} |",
        f"| tokens seen | {_fmt(f['tokens_seen'], ',')} |",
        f"| training time | {_fmt(f['elapsed_s'], '.0f')} s |",
        f"| throughput (median) | {_fmt(f['tokens_per_s_median'], ',.0f')} tokens/s |",
        f"| MFU (median) | {_fmt(f['mfu_median'], '.1%')} |",
        f"| peak memory | {_fmt(f['peak_mem_mb'], ',.0f')} MB |",
        f"| final training loss | {_fmt(f['final_loss'], '.4f')} |",
        f"| final / best validation bits/byte | {_fmt(f['final_val_bpb'], '.4f')} / "
        f"{_fmt(f['best_val_bpb'], '.4f')} |",
        f"| final / best held-out text bits/byte | {_fmt(f['final_val_text_bpb'], '.4f')} / "
        f"{_fmt(f['best_val_text_bpb'], '.4f')} |",
        *(f"| {label} (last chat evaluation) | {_fmt(f['chat'].get(key), '.1%')} |"
          for key, label in CHAT.items() if f["chat"]),
        "",
    ]  # fmt: skip


def plot(runs: list[Run], out: Path) -> dict[str, list[dict[str, Any]]]:
    """Draw every plot of PLOTS (plus held-out text bits/byte when a run has it)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    drawn: dict[str, list[dict[str, Any]]] = {}
    plots = dict(PLOTS)
    if any(r.series(TEXT_BPB)[0] for r in runs):
        plots["val_text_bpb.png"] = ("Held-out text bits per byte", "bits/byte", TEXT_BPB, False)
    for filename, (title, ylabel, key, log_scale) in plots.items():
        fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
        drawn[filename] = []
        for run in runs:
            x, y = run.series(key)
            if x:
                ax.plot(x, y, marker="o" if len(x) < 20 else None, label=run.name)
                drawn[filename].append({"run": run.name, "key": key, "points": len(x)})
        ax.set(title=title, xlabel="tokens seen", ylabel=ylabel)
        if log_scale:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / filename)
        plt.close(fig)
    if any(r.series("chat_turn_end")[0] for r in runs):
        drawn["chat.png"] = _plot_chat(runs, out / "chat.png", plt)
    return drawn


def _plot_chat(runs: list[Run], path: Path, plt: Any) -> list[dict[str, Any]]:
    """Every chat measure of every run on one plot (shares, 0 to 1)."""
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    drawn: list[dict[str, Any]] = []
    for run in runs:
        for key, label in CHAT.items():
            x, y = run.series(key)
            if x:
                name = f"{run.name}: {label}" if len(runs) > 1 else label
                ax.plot(x, y, marker="o" if len(x) < 20 else None, label=name)
                drawn.append({"run": run.name, "key": key, "points": len(x)})
    ax.set(
        title="Chat measures (held-out)", xlabel="tokens seen", ylabel="share", ylim=(-0.02, 1.02)
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return drawn


def write_report(run_dirs: list[str | Path], out: str | Path) -> Path:
    """Write report.md, the PNG plots and report.json into `out`; returns report.md's path."""
    runs = [read_run(p) for p in run_dirs]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    drawn = plot(runs, out)
    stats = {run.name: figures(run) for run in runs}
    lines = [f"# Run report: {', '.join(r.name for r in runs)}", ""]
    for run in runs:
        lines += summary_lines(run, stats[run.name])
    lines += ["## Plots", ""]
    titles = {**{k: v[0] for k, v in PLOTS.items()}, "chat.png": "Chat measures"}
    lines += [f"![{titles.get(name, 'Held-out text')}]({name})" for name in drawn]
    page = out / "report.md"
    page.write_text("\n".join(lines) + "\n", encoding="utf-8")
    report = {"runs": stats, "plots": drawn}
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return page
