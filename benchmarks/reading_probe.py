"""Does a chat model read the request, or answer the prompt's usual call? (issues 35 and 36)

    uv run python benchmarks/reading_probe.py data OUT_DIR --tools runs/assistant-tools.json
    uv run enlace-train configs/runs/sft-cpu.yaml train.init_from=BASE data.path=OUT_DIR \\
        train.lr=5e-3 train.max_steps=60 train.decay_steps=20 train.eval_every=60 \\
        train.checkpoint_every=60 run.out_dir=RUN              # ~5 min on 2 quiet cores
    uv run python benchmarks/reading_probe.py score RUN OUT_DIR

`data` writes a chat data directory of nothing but the built-in shopping-list requests
(`enlace_data.chat.builtin`'s, every tool of the assistant offered, as on the page): a third add
(«Añade leche a la lista»), a third remove («Quita los huevos de la lista»), a third read
(«¿Qué hay en la lista?»). Their prompts differ only in the request's few words, so the call's
`accion` is right only if the model reads them: a model that does not answers every one with
the same action (about a third right); one that reads them gets all three.

`score` replays the held-out requests greedily and counts, per action, the first replies that
call `lista_de_la_compra` with that action, and their balanced share (the mean of the three: a
third for a model that answers all alike, two thirds for one that only tells the question from
the orders, 100 % for one that reads the verb). Sixty fine-tuning steps on the same data from two
bases tell a base whose attention can reach the request from one that cannot, before the whole
chat recipe is blamed on its budget or its data (benchmarks/CHAT.md, fifth session).
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from pathlib import Path

ACTIONS = ("añadir", "quitar", "ver")


def write_data(out: Path, tools_path: Path, train: int, val: int) -> None:
    """train.jsonl and val.jsonl of shopping-list requests, through the built-in generator."""
    from enlace_data._fs import write_atomic
    from enlace_data.chat.builtin import _shopping_conversation, check_tools, read_tools

    tools = check_tools(read_tools(tools_path), str(tools_path))
    splits = {}
    for split, n in (("train", train), ("val", val)):
        rng = random.Random(f"reading-probe:{split}")
        convs = [_shopping_conversation(rng, split == "val", tools) for _ in range(n)]
        splits[split] = "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in convs)
    write_atomic({out / f"{s}.jsonl": text.encode() for s, text in splits.items()})


def action_of(conversation: dict, reply_calls: list | None) -> tuple[str, str | None]:
    """(the reference's action, the reply's: None unless it is a list call)."""
    first = next(m for m in conversation["messages"] if m["role"] == "assistant")
    expected = first["tool_calls"][0]["function"]["arguments"]["accion"]
    call = reply_calls[0] if reply_calls else None
    got = call.arguments.get("accion") if call and call.name == "lista_de_la_compra" else None
    return expected, got


def tally(convs: list[dict], calls: list[list | None]) -> dict[str, tuple[int, int]]:
    """Per action: (right, asked), from each conversation's first reply's parsed calls."""
    right, asked = Counter[str](), Counter[str]()
    for conversation, reply_calls in zip(convs, calls, strict=True):
        expected, got = action_of(conversation, reply_calls)
        asked[expected] += 1
        right[expected] += got == expected
    return {a: (right[a], asked[a]) for a in ACTIONS}


def score(run: str, data: Path, n: int) -> dict[str, tuple[int, int]]:
    """`tally` of a run's greedy first replies to the first n held-out requests."""
    import torch
    from enlace_data.chat import parse_tool_calls, render
    from enlace_data.tokenizer import load_tokenizer
    from enlace_model.checkpoint import load_model, resolve_checkpoint
    from enlace_train.chat_eval import model_replier

    checkpoint = resolve_checkpoint(run)
    model, tokenizer = load_model(checkpoint, dtype=torch.float32), load_tokenizer(checkpoint)
    convs = [json.loads(line) for line in (data / "val.jsonl").open(encoding="utf-8")][:n]
    prompts = []
    for c in convs:
        first = next(i for i, m in enumerate(c["messages"]) if m["role"] == "assistant")
        prompt = render(
            c["messages"][:first], tokenizer, tools=c["tools"], add_generation_prompt=True
        )
        prompts.append(prompt.ids)
    replies = model_replier(model, tokenizer)(prompts, 100)
    return tally(convs, [parse_tool_calls(r, tokenizer) for r in replies])


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("data", help="write the shopping-list requests")
    d.add_argument("out", type=Path)
    d.add_argument("--tools", type=Path, required=True, help="enlace-assistant --tools-json")
    d.add_argument("--conversations", type=int, default=4000)
    s = sub.add_parser("score", help="per-action accuracy of a fine-tuned run")
    s.add_argument("run")
    s.add_argument("data", type=Path)
    s.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    if args.command == "data":
        write_data(args.out, args.tools, args.conversations, max(1, args.conversations // 10))
        print(f"wrote {args.out}/train.jsonl and val.jsonl")
        return
    result = score(args.run, args.data, args.requests)
    cells = "  ".join(f"{a} {r}/{n}" for a, (r, n) in result.items())
    print(f"{args.run}: {cells}  balanced {balanced(result):.1%}")


def balanced(result: dict[str, tuple[int, int]]) -> float:
    """The mean of the per-action shares: 1/3 for a model that answers every request alike (or
    one that tells only the question «¿Qué hay…?» apart: 1/3 + its chance on the other two), 1
    for one that reads every request."""
    return sum(r / n for r, n in result.values() if n) / sum(1 for _, n in result.values() if n)


if __name__ == "__main__":
    main()
