"""Snapshots of a large household: the time to make one (online copy, archive, full read-back) and
its size for a history of 10,000 conversations, the time to verify and restore it, and the family
page's latency for 20 concurrent conversations while a snapshot is being made against without one.

Run by hand (not part of the tests; timings on a shared machine are indicative only):

    uv run python benchmarks/bench_snapshot.py
    uv run python benchmarks/bench_snapshot.py --conversations 50000 --messages 6 --people 40

The history is written straight into SQLite (the store's own schema): each conversation has
`--messages` messages of ordinary Spanish text with some variation (it compresses as real chat
does, not as repeated bytes would). The page part reuses bench_web.py's client (sign in, ask,
read the streamed answer to its end) against the scripted model of enlace-agent's tests; during
the second round snapshots are made back to back until every conversation has ended.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import secrets
import sqlite3
import sys
import tempfile
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WORDS = [
    "la",
    "receta",
    "de",
    "la",
    "tortilla",
    "lleva",
    "huevo",
    "patata",
    "cebolla",
    "y",
    "aceite",
    "de",
    "oliva",
    "mañana",
    "hará",
    "sol",
    "en",
    "Soria",
    "con",
    "máximas",
    "de",
    "veinte",
    "grados",
    "el",
    "tren",
    "sale",
    "a",
    "las",
    "ocho",
    "desde",
    "Chamartín",
    "y",
    "llega",
    "a",
    "las",
    "diez",
    "según",
    "la",
    "página",
    "de",
    "Renfe",
    "la",
    "farmacia",
    "de",
    "guardia",
    "está",
    "en",
    "la",
    "calle",
    "Mayor",
    "número",
    "cinco",
]


def _module(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def fill(database: Path, conversations: int, messages: int, people: int) -> None:
    from enlace_agent.household.database import Store

    Store(database)
    rng = random.Random(0)
    now = time.time()
    with closing(sqlite3.connect(database)) as db, db:
        for n in range(conversations):
            cid = secrets.token_hex(16)
            person = f"Persona{n % people:02d}"
            db.execute(
                "INSERT INTO conversations (id, person, title, created, updated, history) "
                "VALUES (?, ?, ?, ?, ?, '[]')",
                (cid, person, " ".join(rng.choices(WORDS, k=6)), now - n, now - n),
            )
            db.executemany(
                "INSERT INTO messages (conversation_id, role, content, sources, created) "
                "VALUES (?, ?, ?, ?, ?)",
                [
                    (
                        cid,
                        "user" if m % 2 == 0 else "assistant",
                        " ".join(rng.choices(WORDS, k=rng.randint(10, 80))),
                        json.dumps([{"url": f"https://es.wikipedia.org/wiki/{rng.choice(WORDS)}"}])
                        if m % 2
                        else "[]",
                        now - n,
                    )
                    for m in range(messages)
                ],
            )


def page_round(
    web: Any, helpers: Any, config: Any, names: list[str], during: Any = None
) -> list[dict[str, Any]]:
    from enlace_agent.assistant import Assistant, build_client
    from enlace_agent.web import build_app

    assistant = Assistant(build_client(config, {}), tools=[], config=config)
    page = helpers.serve_in_thread(build_app(assistant, {}))
    results: list[dict[str, Any]] = [{} for _ in names]
    threads = [
        threading.Thread(target=web.chat, args=(page, n, r))
        for n, r in zip(names, results, strict=True)
    ]
    stop = threading.Event()
    background = None
    if during is not None:
        background = threading.Thread(target=during, args=(stop,))
        background.start()
        time.sleep(0.05)  # the first snapshot is under way when the family asks
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    stop.set()
    if background is not None:
        background.join()
    page.stop()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=4, help="messages per conversation")
    parser.add_argument("--people", type=int, default=20, help="people (and concurrent chats)")
    parser.add_argument("--pieces", type=int, default=10, help="pieces of each streamed answer")
    parser.add_argument("--delay", type=float, default=0.02, help="model's pause between pieces")
    args = parser.parse_args()

    from enlace_agent import snapshot
    from enlace_config.schema.agent import AssistantConfig

    web = _module("bench_web", HERE / "bench_web.py")
    helpers = web._conftest()  # pyright: ignore[reportPrivateUsage]
    with tempfile.TemporaryDirectory() as tmp:
        database = Path(tmp) / "web.sqlite3"
        started = time.perf_counter()
        fill(database, args.conversations, args.messages, args.people)
        print(
            f"history: {args.conversations} conversations x {args.messages} messages, "
            f"{database.stat().st_size / 1e6:.1f} MB (written in {time.perf_counter() - started:.1f} s)"
        )
        model = web.echo_model(helpers, args.pieces, args.delay)
        names = [f"Persona{i:02d}" for i in range(args.people)]
        config = AssistantConfig.model_validate(
            {
                "base_url": model.base_url,
                "max_tool_rounds": 0,
                "web": {"people": [{"name": n} for n in names], "database": str(database)},
            }
        )
        household = snapshot.household(config, {})

        started = time.perf_counter()
        made = snapshot.create(household)
        create_s = time.perf_counter() - started
        print(
            f"snapshot create (copy, archive, read-back and integrity check): {create_s:.2f} s, "
            f"archive {made.size / 1e6:.1f} MB ({made.size / database.stat().st_size:.0%} of "
            "the history file)"
        )
        started = time.perf_counter()
        snapshot.verify(household, made.path)
        print(f"snapshot verify: {time.perf_counter() - started:.2f} s")
        started = time.perf_counter()
        snapshot.restore(household, made.path)  # with its own before-restore snapshot
        print(
            f"snapshot restore (before-restore snapshot included): {time.perf_counter() - started:.2f} s"
        )

        made_during: list[float] = []

        def snapshots(stop: threading.Event) -> None:
            while not stop.is_set():
                began = time.perf_counter()
                snapshot.create(household)
                made_during.append(time.perf_counter() - began)

        quiet = page_round(web, helpers, config, names)
        busy = page_round(web, helpers, config, names, during=snapshots)
        model.server.stop.set()
        model.server.server.shutdown()

    print(
        f"the page, {args.people} concurrent conversations (answers of {args.pieces} pieces "
        f"{args.delay * 1000:.0f} ms apart):"
    )
    for label, results in (("without a snapshot", quiet), ("during snapshots", busy)):
        errors = [r["error"] for r in results if "error" in r]
        print(f"  {label}:")
        print(
            "    " + web.summary("first token", [r["first_s"] for r in results if "first_s" in r])
        )
        print("    " + web.summary("whole answer", [r["end_s"] for r in results if "end_s" in r]))
        print(f"    errors: {len(errors)}" + (f" {errors}" if errors else ""))
    print(
        f"  snapshots made during the second round: {len(made_during)} "
        f"({', '.join(f'{s:.2f} s' for s in made_during)})"
    )
    print("load average (1, 5, 15 min): " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
