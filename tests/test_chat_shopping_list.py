"""The built-in chat conversations about the family's shopping list (enlace-data) are what the
assistant really writes (enlace-agent): the system prompt's list paragraph where the assistant
puts it, the tool's name and arguments, and the results the real tool returns for them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from enlace_agent.assistant.prompt import system_prompt
from enlace_agent.household import Store
from enlace_agent.tools import offered_specs
from enlace_agent.tools.shopping import ShoppingList, ShoppingListTool
from enlace_config.contracts import SHOPPING_LIST_PROMPT, SHOPPING_LIST_TOOL_NAME
from enlace_config.schema.agent import AssistantConfig
from enlace_data.chat.builtin import builtin_conversations


def _list_conversations(split: str) -> list[dict[str, Any]]:
    convs = builtin_conversations(split, 600, seed=5, tools=offered_specs(AssistantConfig()))
    return [c for c in convs if SHOPPING_LIST_TOOL_NAME in str(c["messages"][2:3])]


def test_shopping_conversations_replay_on_the_real_tool(tmp_path: Path) -> None:
    convs = _list_conversations("train")
    actions = {c["messages"][2]["tool_calls"][0]["function"]["arguments"]["accion"] for c in convs}
    assert actions == {"añadir", "quitar", "ver"}  # all three kinds, in a 10% share of 600
    for n, conv in enumerate(convs):
        system = conv["messages"][0]["content"]
        assert "\n\n" + SHOPPING_LIST_PROMPT + "\n\n" in system  # before the memory block
        shopping = ShoppingList(Store(tmp_path / f"{n}.sqlite3"))
        call = conv["messages"][2]["tool_calls"][0]["function"]
        args = call["arguments"]
        if args["accion"] != "añadir":  # what is removed or read is on the list before
            shopping.add(
                "Ana", args.get("cosas") or conv["messages"][3]["content"][13:-1].split(", ")
            )
        result = ShoppingListTool(shopping, "Ana").run(json.dumps(args))
        assert not result.error and result.content == conv["messages"][3]["content"]


def test_the_validation_split_has_its_own_goods() -> None:
    def goods(split: str) -> set[str]:
        found: set[str] = set()
        for conv in _list_conversations(split):
            found |= set(
                conv["messages"][2]["tool_calls"][0]["function"]["arguments"].get("cosas", [])
            )
        return found

    assert goods("val") and not goods("val") & goods("train")


def test_the_default_prompt_has_no_list_paragraph_without_a_household() -> None:
    import datetime as dt

    assert SHOPPING_LIST_PROMPT not in system_prompt(None, dt.date(2026, 12, 3))
