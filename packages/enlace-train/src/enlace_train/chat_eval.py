"""The chat measures taken at each evaluation of a chat (SFT) run, on held-out conversations.

For each of the first data.chat_eval_conversations conversations of the val split: the messages
before its first assistant turn are rendered with the generation prompt, the model replies
greedily (at most data.chat_eval_max_tokens tokens, stopping at <|im_end|>), and the reply is
compared with the reference turn:
- turn_end: the share of replies that end with <|im_end|> (not cut by the token limit);
- tool_call: among references that call a tool (search-needing prompts with the tool offered), the
  share of replies holding a well-formed tool call (closed, JSON, a name and object arguments)
  naming the same tool, and ending their turn;
- spurious_calls: among references that call no tool, the share of replies that call one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from enlace_config.schema import RunConfig
from enlace_model import generate

from enlace_train.metrics import log


@dataclass
class ChatEval:
    conversations: int
    turn_end: float
    tool_prompts: int
    tool_call: float | None
    spurious_calls: float | None


def _cases(cfg: RunConfig, tokenizer: Any) -> list[tuple[list[int], str | None]]:
    """(prompt ids, the tool the reference calls or None) per held-out conversation that fits."""
    from enlace_data.chat import render
    from enlace_data.chat_loader import load_split

    convs, _ = load_split(cfg.data, "val")
    room = cfg.model.context_length - cfg.data.chat_eval_max_tokens
    cases: list[tuple[list[int], str | None]] = []
    for conv in convs:
        messages = conv["messages"]
        first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
        prompt = render(
            messages[:first], tokenizer, tools=conv.get("tools"), add_generation_prompt=True
        ).ids
        if len(prompt) > room:
            continue
        calls = messages[first]["tool_calls"]
        cases.append((prompt, calls[0]["function"]["name"] if calls else None))
        if len(cases) == cfg.data.chat_eval_conversations:
            break
    return cases


@torch.no_grad()
def chat_eval(model: torch.nn.Module, cfg: RunConfig, device: torch.device) -> ChatEval:
    """Replay held-out conversations' first replies (see the module docstring)."""
    from enlace_data.chat import parse_tool_calls
    from enlace_data.chat_loader import chat_tokenizer
    from enlace_data.special_tokens import IM_END

    tokenizer = chat_tokenizer(cfg.data)
    cases = _cases(cfg, tokenizer)
    limit = cfg.data.chat_eval_max_tokens
    was_training = model.training
    model.eval()
    try:
        replies = generate(
            model,  # type: ignore[arg-type]
            [p for p, _ in cases],
            limit,
            stop_tokens=[tokenizer.special_ids[IM_END]],
        )
    finally:
        model.train(was_training)
    ended = [len(r) < limit for r in replies]  # the stop token is not returned
    tool_ok = spurious = tool_n = 0
    for (_, expected), reply, end in zip(cases, replies, ended, strict=True):
        calls = parse_tool_calls(reply, tokenizer)
        if expected is not None:
            tool_n += 1
            tool_ok += bool(end and calls and calls[0].name == expected)
        else:
            spurious += bool(calls)
    plain = len(cases) - tool_n
    return ChatEval(
        conversations=len(cases),
        turn_end=sum(ended) / max(len(cases), 1),
        tool_prompts=tool_n,
        tool_call=tool_ok / tool_n if tool_n else None,
        spurious_calls=spurious / plain if plain else None,
    )


def log_chat_eval(
    model: torch.nn.Module, cfg: RunConfig, backend: Any, step: int, metrics: Any
) -> None:
    """Run chat_eval, write its row to metrics.jsonl and log it."""
    r = chat_eval(model, cfg, backend.device)
    metrics.write(
        {
            "step": step,
            "chat_turn_end": r.turn_end,
            "chat_tool_call": r.tool_call,
            "chat_spurious_calls": r.spurious_calls,
            "chat_eval_conversations": r.conversations,
            "chat_tool_prompts": r.tool_prompts,
        }
    )
    pct = [
        "n/a" if x is None else f"{100 * x:.1f}%"
        for x in (r.turn_end, r.tool_call, r.spurious_calls)
    ]
    log.info(
        f"step {step} | chat: turn endings {pct[0]} of {r.conversations} | well-formed tool calls "
        f"{pct[1]} of {r.tool_prompts} | spurious calls {pct[2]}"
    )
