"""The reading warm-up's conversations: the household's requests alone, with `--searches` short
searches and with `--plain` questions answered without a tool among them (`enlace-data chat
builtin OUT_DIR --tools T --household-requests [--searches SHARE] [--plain SHARE]`,
scripts/chat-cpu.sh), drawn with the built-in set's own conversation writers so that
their words, calls and replies are the full set's."""

from __future__ import annotations

import random
from typing import Any

from enlace_config.contracts import FORGET_TOOL_NAME, REMEMBER_TOOL_NAME, SHOPPING_LIST_TOOL_NAME

from enlace_data.chat.builtin import (
    _as_typed,
    _memory_conversation,
    _plain,
    _search,
    _search_turns,
    _shopping_conversation,
)
from enlace_data.chat.tools import check_tools, tool_name
from enlace_data.errors import DataError

__all__ = ["check_shares", "household_requests"]


# Of the household requests, this share remember or forget a fact, the rest use the shopping list
# (about 46 % remember, 23 % forget, 31 % the list: the mix of the warm-up measured in
# benchmarks/CHAT.md, whose weakest call is `recordar`).
REQUESTS_MEMORY_SHARE = 0.75


def check_shares(searches: float, plain: float) -> None:
    """Refuse shares that leave no draw to the household's requests (`household_requests`' and
    the CLI's check, named by the CLI's options). Each is a chance drawn in turn (the plain
    question's first, the search's when it fails), so the requests keep (1 - plain) x (1 -
    searches) of the draws: each below 1 is enough."""
    for option, share in (("--searches", searches), ("--plain", plain)):
        if not 0 <= share < 1:
            raise DataError(f"{option} must be a share in [0, 1), got {share}")


def household_requests(
    split: str,
    n: int,
    *,
    seed: int = 0,
    tools: list[dict[str, Any]],
    searches: float = 0.0,
    plain: float = 0.0,
) -> list[dict[str, Any]]:
    """n requests to the household's tools (remember, forget, add to, remove from or read the
    shopping list), each the whole prompt: no system prompt and no tool specs before it, the same
    words, calls, results and replies as the full set's. The reading warm-up of
    scripts/chat-cpu.sh: behind ~2,000 positions of specs a base pretrained on 128 positions
    spreads its attention and misses the request; short prompts teach a head to find it, which
    the SFT on the full prompts then keeps (benchmarks/CHAT.md, sixth and seventh sessions).
    `tools` must offer the memory and the shopping list (the specs the assistant sends).

    `searches`: the chance that a draw is a search instead (the household draws that hold no
    request, a question a memory answers, are drawn again: 0.3 gives about 35 % searches), as
    short: the question, the call whose query is the question's own words, the result, and the
    answer that is the result's line (the full set's search conversations without their system
    prompt and spec). The SFT's 120 steps show an estimated 200 searches; the warm-up's set holds
    about 1,400, and with them the search copies the question's first byte (benchmarks/CHAT.md,
    eleventh session).

    `plain`: the chance that a draw is a question answered without a tool instead (a greeting,
    general knowledge, a sum, the house: the full set's plain conversations, short), drawn before
    the searches' chance. A warm-up of calls alone taught the model that every question calls a
    tool: 0.2 halved its spurious calls (10.5 % to 5.5 %, medians of 3 seeds; benchmarks/CHAT.md,
    twelfth session)."""
    check_shares(searches, plain)
    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    offered = check_tools(tools, "tools")
    missing = {REMEMBER_TOOL_NAME, FORGET_TOOL_NAME, SHOPPING_LIST_TOOL_NAME} - {
        tool_name(t) for t in offered
    }
    if missing:
        raise DataError(f"tools: the household requests call {sorted(missing)}, not offered")
    val = split == "val"
    rng = random.Random(f"enlace-chat-requests:{split}:{seed}")
    out: list[dict[str, Any]] = []
    while len(out) < n:
        if plain and rng.random() < plain:  # 0: no draw, the set of before
            out.append({"messages": _plain(rng, val), "tools": []})
            continue
        if searches and rng.random() < searches:  # 0: no draw, the household set of before
            s = _search(rng, val)
            expect = {"query": list(s.entities), "answer": list(s.facts)}
            out.append({"messages": _search_turns(rng, s), "tools": [], "expect": expect})
            continue
        if rng.random() < REQUESTS_MEMORY_SHARE:
            conv = _memory_conversation(rng, val, offered)
        else:
            conv = _shopping_conversation(rng, val, offered)
        messages = [m for m in conv["messages"] if m["role"] != "system"]
        if not any(m.get("tool_calls") for m in messages):
            continue  # a question the memory answers: no request to read
        out.append({**conv, "messages": messages, "tools": []})
    return _as_typed(out, random.Random(f"enlace-chat-typed-requests:{split}:{seed}"))
