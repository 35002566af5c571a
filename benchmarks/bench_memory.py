"""What the memory costs (issue 27): the time to build a turn's memories into the prompt with 10,
1,000 and 10,000 memories in the history file, and the family page's p95 first-token latency with
20 conversations at once, with the memory off and on (the page and the scripted model of
benchmarks/bench_web.py: one home for them).

Run by hand (not part of the tests; timings on a shared machine are indicative only):

    uv run python benchmarks/bench_memory.py
    uv run python benchmarks/bench_memory.py --sizes 10 1000 10000 --repeats 50 --people 20

The prompt's part is `MemoryView.recall` (the FTS5 query for the question's words, then the most
recent, under the default budget) plus the quoted block, then `used` (which of them the answer
shares words with, marking them used): what the page does before and after each answer. The
memories are spread over the people (two thirds personal, one third the household's); each
question shares a word with about one memory in a hundred.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WORDS = ("colegio", "abuela", "médico", "dentista", "piano", "fútbol", "cumpleaños", "alergia")
WORDS += ("tortilla", "Soria", "guitarra", "natación", "vacaciones", "farmacia", "perro", "gato")


def _bench_web() -> Any:
    spec = importlib.util.spec_from_file_location("bench_web", HERE / "bench_web.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def fill(database: Path, config: Any, names: list[str], count: int) -> None:
    """`count` memories in the history file, in one transaction (as many writes would leave it)."""
    from enlace_agent.household.database import Store
    from enlace_agent.memory import MemoryStore

    store = MemoryStore(Store(database), config.memory)
    now = time.time()
    rows = []
    for i in range(count):
        owner = None if i % 3 == 2 else names[i % len(names)]
        word = WORDS[i % len(WORDS)] if i % 100 == 0 else f"asunto{i}"
        text = f"Recuerdo {i}: lo del {word} de la familia, apuntado para no olvidarlo"
        rows.append((owner, text, names[0], "cli", now - count + i, now - count + i))
    with store.store.transaction() as db:
        db.executemany(
            "INSERT INTO memories (person, text, author, source, created, updated) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            rows,
        )


def prompt_times(count: int, repeats: int, names: list[str]) -> tuple[list[float], int]:
    """Seconds to recall, quote and mark the memories of one turn, `repeats` times; and how many
    memories the last prompt held."""
    from enlace_agent.assistant.prompt import memory_block
    from enlace_agent.household.database import Store
    from enlace_agent.memory import MemoryStore, MemoryView
    from enlace_config.schema.agent import AssistantConfig

    config = AssistantConfig()
    times: list[float] = []
    held = 0
    with tempfile.TemporaryDirectory() as tmp:
        database = Path(tmp) / "web.sqlite3"
        fill(database, config, names, count)
        view = MemoryView(MemoryStore(Store(database), config.memory), names[0])
        for i in range(repeats):
            question = f"¿Qué sabes del {WORDS[i % len(WORDS)]} de casa?"
            started = time.perf_counter()
            recalled = view.recall(question)
            memory_block(view.person, recalled)
            view.used(recalled, question, f"Sobre el {WORDS[i % len(WORDS)]}: lo apuntado.")
            times.append(time.perf_counter() - started)
            held = len(recalled)
    return times, held


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 1000, 10_000])
    parser.add_argument("--repeats", type=int, default=50, help="prompts built per size")
    parser.add_argument("--people", type=int, default=20, help="concurrent conversations")
    parser.add_argument("--page-memories", type=int, default=1000, help="memories, page runs")
    parser.add_argument("--pieces", type=int, default=10, help="pieces of each streamed answer")
    parser.add_argument("--delay", type=float, default=0.02, help="model's pause between pieces")
    args = parser.parse_args()

    web = _bench_web()
    names = [f"Persona{i:02d}" for i in range(args.people)]
    print("building a turn's memories (recall + quoted block + used), default budget:")
    for size in args.sizes:
        times, held = prompt_times(size, args.repeats, names)
        print(
            f"  {size:>6} memories in the file, {held} in the prompt: " + web.summary("", times)[2:]
        )

    helpers = web._conftest()  # pyright: ignore[reportPrivateUsage]
    model = web.echo_model(helpers, args.pieces, args.delay)
    print(
        f"the page, {args.people} conversations at once, answers of {args.pieces} pieces "
        f"{args.delay * 1000:.0f} ms apart:"
    )
    errors = 0
    for label, enabled in (("memory off", False), (f"memory on, {args.page_memories}", True)):
        results, wall = web.run_page(
            helpers,
            model,
            names,
            settings={"memory": {"enabled": enabled}},
            prepare=lambda database, config: fill(database, config, names, args.page_memories),
        )
        failed = [r["error"] for r in results if "error" in r]
        errors += len(failed)
        first = web.summary("first token", [r["first_s"] for r in results if "first_s" in r])
        print(f"  {label}: {first}; wall {wall:.2f} s; errors {len(failed)} {failed or ''}")
    model.server.stop.set()
    model.server.server.shutdown()
    print("load average (1, 5, 15 min): " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
