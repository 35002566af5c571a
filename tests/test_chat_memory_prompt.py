"""The built-in chat conversations that remember, forget and use a family fact (enlace-data) are
what the assistant really writes (enlace-agent): the system prompt's memory block, the tools'
names and arguments, and their results. A model trained on a copy that drifted would learn a
prompt it never sees."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from enlace_agent.assistant.prompt import memory_block
from enlace_agent.household.database import Store
from enlace_agent.memory.store import MemoryStore
from enlace_agent.memory.view import MemoryView
from enlace_agent.tools import offered_specs
from enlace_agent.tools.memory import FORGET, REMEMBER
from enlace_agent.tools.protocol import TurnContext
from enlace_config.contracts import SHOPPING_LIST_TOOL_NAME
from enlace_config.schema.agent import AssistantConfig
from enlace_data.chat.builtin import MEMORY_FACTS, builtin_conversations

LINE = re.compile(r"^\d+\. \[(?P<whose>[^\]]+)\] «(?P<text>.*)»$")


def _memory_conversations() -> list[dict[str, Any]]:
    tools = offered_specs(AssistantConfig())
    convs = builtin_conversations("train", 600, seed=3, tools=tools)
    return [
        c
        for c in convs
        if c["messages"][0]["role"] == "system"
        and "Hablas con" in str(c)
        and SHOPPING_LIST_TOOL_NAME not in str(c["messages"][2])  # the list's: their own test
    ]


def _replay(conv: dict[str, Any], tmp_path: Path) -> None:
    """The conversation's memories put in a real store, its tool call run by the real tool."""
    system = conv["messages"][0]["content"]
    person = re.search(r"Hablas con ([^.]+)\.", system)
    assert person is not None
    name = person.group(1)
    store = MemoryStore(
        Store(tmp_path / f"{len(list(tmp_path.iterdir()))}.sqlite3"), AssistantConfig().memory, []
    )
    for line in system.splitlines():
        if m := LINE.match(line):
            scope = "familia" if m["whose"] == "familia" else "personal"
            store.add(name, m["text"], scope, source="page")
    listed = store.list(name)
    # the block the assistant writes for these memories, in the order they were written
    block = memory_block(name, sorted(listed, key=lambda m: m.id))
    assert system.endswith("\n\n" + block), (system, block)
    view = MemoryView(store, name)
    calls = [c for m in conv["messages"] for c in m.get("tool_calls") or []]
    results = [m["content"] for m in conv["messages"] if m["role"] == "tool"]
    # made as the assistant makes them, for what the person said: each way the conversations
    # ask to remember or forget must be one the settings' words recognise (issue 37), or the
    # real tool only proposes and its result is not the one the model was taught
    asked = next(m["content"] for m in conv["messages"] if m["role"] == "user")
    context = TurnContext(AssistantConfig(), person=name, memory=view, question=asked)
    for call, result in zip(calls, results, strict=True):
        fn = call["function"]
        tool = (REMEMBER if fn["name"] == "recordar" else FORGET).make(context)
        assert fn["name"] in {"recordar", "olvidar"}
        if fn["name"] == "olvidar":  # what it forgets is remembered before
            store.add(name, fn["arguments"]["recuerdo"], "personal", source="page")
        assert tool.run(json.dumps(fn["arguments"])).content == result


def test_memory_conversations_match_the_assistant(tmp_path: Path) -> None:
    convs = _memory_conversations()
    kinds = {
        c["messages"][2].get("tool_calls", [{}])[0].get("function", {}).get("name") for c in convs
    }
    assert kinds == {"recordar", "olvidar", None}  # remember, forget and use, all present
    offered = {t["function"]["name"] for t in offered_specs(AssistantConfig())}
    for conv in convs:
        assert {t["function"]["name"] for t in conv["tools"]} == offered
        _replay(conv, tmp_path)


def test_the_facts_make_a_sentence_to_remember() -> None:
    for said, question, answer in MEMORY_FACTS:
        assert said[0].islower() and question.startswith("¿") and answer.endswith(".")
