"""benchmarks/reading_probe.py: its requests differ only in their words, and its tally tells a
model that reads them from one that answers every prompt with the usual call (issues 35, 36)."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path

from enlace_data.chat import ToolCall
from enlace_data.chat.builtin import SEARCH_TOOL

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location(
    "reading_probe", REPO / "benchmarks" / "reading_probe.py"
)
assert spec and spec.loader
reading_probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(reading_probe)

TOOLS = [
    SEARCH_TOOL,
    *({"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
      for n in ("lista_de_la_compra", "recordar", "olvidar")),
]  # fmt: skip


def _data(tmp_path: Path) -> list[dict]:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    reading_probe.write_data(tmp_path / "probe", tools, 300, 90)
    return [json.loads(line) for line in (tmp_path / "probe" / "val.jsonl").open()]


def test_the_requests_are_the_three_actions_told_apart_by_their_words_only(tmp_path: Path) -> None:
    convs = _data(tmp_path)
    actions = Counter(reading_probe.action_of(c, None)[0] for c in convs)
    assert set(actions) == set(reading_probe.ACTIONS) and min(actions.values()) >= 10, actions
    for c in convs:  # what comes before the request: the system prompt and every tool, no more
        roles = [m["role"] for m in c["messages"]]
        assert roles[:3] == ["system", "user", "assistant"] and len(c["tools"]) == 4


def test_the_tally_tells_a_model_that_reads_from_one_that_does_not(tmp_path: Path) -> None:
    convs = _data(tmp_path)

    def call(action: str) -> list[ToolCall]:
        return [ToolCall("lista_de_la_compra", {"accion": action})]

    reads = reading_probe.tally(convs, [call(reading_probe.action_of(c, None)[0]) for c in convs])
    usual = reading_probe.tally(convs, [call("ver") for _ in convs])
    searches = reading_probe.tally(
        convs, [[ToolCall("buscar_en_internet", {"accion": "ver"})]] * len(convs)
    )
    assert all(r == n for r, n in reads.values()) and reading_probe.balanced(reads) == 1.0
    assert usual["ver"][0] == usual["ver"][1] and usual["añadir"][0] == usual["quitar"][0] == 0
    assert abs(reading_probe.balanced(usual) - 1 / 3) < 1e-9
    orders_alike = [  # the question told apart, every order answered «añadir»
        call("ver" if reading_probe.action_of(c, None)[0] == "ver" else "añadir") for c in convs
    ]
    assert abs(reading_probe.balanced(reading_probe.tally(convs, orders_alike)) - 2 / 3) < 1e-9
    assert sum(r for r, _ in searches.values()) == 0  # another tool with the same words is wrong
