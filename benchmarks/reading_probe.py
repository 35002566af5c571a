"""Does a chat model read the request, or answer the prompt's usual call? (issues 35 and 36)

    uv run python benchmarks/reading_probe.py data OUT_DIR --tools runs/assistant-tools.json
    uv run enlace-train configs/runs/sft-cpu.yaml train.init_from=BASE data.path=OUT_DIR \\
        train.lr=5e-3 train.max_steps=60 train.decay_steps=20 train.eval_every=60 \\
        train.checkpoint_every=60 run.out_dir=RUN              # ~5 min on 2 quiet cores
    uv run python benchmarks/reading_probe.py score RUN OUT_DIR
    uv run python benchmarks/reading_probe.py attention RUN OUT_DIR      # where the call looks
    uv run python benchmarks/reading_probe.py choice runs/sft-cpu runs/chat-data   # the script's
    uv run python benchmarks/reading_probe.py copying runs/sft-cpu runs/chat-data  # model

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

`data --request-only` writes the same requests without the system prompt and the tools (a
conversation of ~200 positions instead of ~2,500): the same words to read, nothing to read past;
`--short-share 0.5` does it to half of the training requests only (the held-out ones keep the
assistant's prompts).
`choice RUN DATA` scores a chat run on a whole chat set (the script's runs/chat-data, full prompts):
of the held-out conversations whose first call is a household tool (`recordar`, `olvidar`, the
list's three actions), the first replies that call the right tool, and the right tool and action
(benchmarks/CHAT.md, sixth and seventh sessions: 113 of the script's 400).
`copying RUN DATA` reads the copying mechanism, teacher-forced: for each byte (after the first)
of the names and facts a reference call copies from the request (`expect`), for their first bytes
apart, and for letter records («qwhfk|qwhfk», copy_probe.py's), whether the model predicts it and
how much attention any head puts on the same byte in the source (an induction head: near 1; none:
about 1/position) (benchmarks/CHAT.md, seventh and eighth sessions: the head a base learned on
records is erased by the chat fine-tuning unless records stay in the warm-up's rows, and even
then a name's first byte, found only by several bytes of key, is missed); and for recall records
(«ab=qwhf cd=zmu|cd=zmu ab=qwhf», the values' first bytes after the «|»), whether a head matches
a key of several bytes, what that first byte needs (ninth session). Each kind also by the key its
bytes need (`key_needed`: the fewest tokens before a byte that say where it stood before; «de »
is followed by «tren» and by «Antequera» in «la estación de tren de Antequera», whose «A» needs
«en de »): CI's chat model copies 885 of the 887 bytes of names and facts whose key is 4 bytes
or fewer and 58 of the 65 that need 5 or more; over every byte of its queries (keys counted in the
question alone, a one-off) it misses a third of those, the copy loops of its calls (twelfth
session).
`attention` reads the mechanism: teacher-forced on held-out conversations, the attention mass that
each layer's heads put, from the position that writes the action, on the request, on the tool
specs, on the rest of the prompt and on the 16 positions just before it (benchmarks/CHAT.md,
sixth session: a base pretrained on 128 positions spreads it over the 2,000 positions of tools).
"""

from __future__ import annotations

import argparse
import json
import math
import random
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor

ACTIONS = ("añadir", "quitar", "ver")


def write_data(
    out: Path,
    tools_path: Path,
    train: int,
    val: int,
    *,
    request_only: bool = False,
    short_share: float = 0.0,
) -> None:
    """train.jsonl and val.jsonl of shopping-list requests, through the built-in generator;
    request_only drops the system prompt and the tools (the same requests, short prompts), and
    short_share does it to that share of the training requests only (val keeps every prompt)."""
    from enlace_data._fs import write_atomic
    from enlace_data.chat.builtin import _shopping_conversation
    from enlace_data.chat.tools import check_tools, read_tools

    tools = check_tools(read_tools(tools_path), str(tools_path))
    splits = {}
    for split, n in (("train", train), ("val", val)):
        rng = random.Random(f"reading-probe:{split}")
        convs = [_shopping_conversation(rng, split == "val", tools) for _ in range(n)]
        draw = random.Random(0)  # which training requests lose their prompt under short_share
        for c in convs:
            short = split == "train" and short_share > 0 and draw.random() < short_share
            if request_only or short:
                c["messages"] = [m for m in c["messages"] if m["role"] != "system"]
                c["tools"] = []
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


# Room for the longest household call the set asks for (a `recordar` with «alcance: familia», ~120
# tokens with its markers): a reply cut before `</tool_call>` parses as no call at all, which is
# how 100 tokens undercounted `recordar` (benchmarks/CHAT.md, seventh session).
REPLY_TOKENS = 200


def first_calls(run: str, convs: list[dict]) -> list[list | None]:
    """The parsed calls of a run's greedy first reply to each conversation (its prompt: the
    messages before the first assistant turn, with the conversation's tools)."""
    import torch
    from enlace_data.chat import parse_tool_calls, render
    from enlace_data.tokenizer import load_tokenizer
    from enlace_model.checkpoint import load_model, resolve_checkpoint
    from enlace_train.chat_eval import model_replier

    checkpoint = resolve_checkpoint(run)
    model, tokenizer = load_model(checkpoint, dtype=torch.float32), load_tokenizer(checkpoint)
    prompts = []
    for c in convs:
        first = next(i for i, m in enumerate(c["messages"]) if m["role"] == "assistant")
        prompt = render(
            c["messages"][:first], tokenizer, tools=c.get("tools"), add_generation_prompt=True
        )
        prompts.append(prompt.ids)
    replies = model_replier(model, tokenizer)(prompts, REPLY_TOKENS)
    return [parse_tool_calls(r, tokenizer) for r in replies]


def _held_out(data: Path) -> list[dict]:
    return [json.loads(line) for line in (data / "val.jsonl").open(encoding="utf-8")]


def score(run: str, data: Path, n: int) -> dict[str, tuple[int, int]]:
    """`tally` of a run's greedy first replies to the first n held-out requests."""
    convs = _held_out(data)[:n]
    return tally(convs, first_calls(run, convs))


def household_call(call: Any) -> str:
    """A call as `choice` counts it: the tool, and the list's action after it."""
    name, arguments = (
        (call.name, call.arguments) if hasattr(call, "name") else (call["name"], call["arguments"])
    )
    action = arguments.get("accion") if isinstance(arguments, dict) else None
    return f"{name} {action}" if name == "lista_de_la_compra" else name


def household_requests(convs: list[dict]) -> list[dict]:
    """The conversations whose first assistant turn calls a household tool (not the search)."""
    out = []
    for c in convs:
        first = next(m for m in c["messages"] if m["role"] == "assistant")
        calls = first.get("tool_calls") or []
        if calls and calls[0]["function"]["name"] != "buscar_en_internet":
            out.append(c)
    return out


def choice(convs: list[dict], calls: list[list | None]) -> dict[str, tuple[int, int, int]]:
    """Per reference call (`recordar`, `olvidar`, `lista_de_la_compra añadir`, ...): how many
    first replies called the right tool, the right tool and action, and how many were asked.
    A model that answers every request with one call gets only that call's row right."""
    counts: dict[str, list[int]] = {}
    for conversation, reply_calls in zip(convs, calls, strict=True):
        first = next(m for m in conversation["messages"] if m["role"] == "assistant")
        expected = household_call(first["tool_calls"][0]["function"])
        got = household_call(reply_calls[0]) if reply_calls else ""
        row = counts.setdefault(expected, [0, 0, 0])
        row[0] += got.split(" ")[0] == expected.split(" ")[0]
        row[1] += got == expected
        row[2] += 1
    return {k: (a, b, n) for k, (a, b, n) in sorted(counts.items())}


REGIONS = ("request", "tools", "prompt", "recent", "reply")
RECENT = 16  # the positions just before the action's: the call's own form


def regions_of(conversation: dict, tokenizer: Any) -> tuple[list[int], list[str]]:
    """The ids of the conversation up to the position whose next token starts the first call's
    action, and a region (REGIONS) for each: the latest request's words, the tool specs, the rest
    of the prompt, the RECENT positions before the action's, and the reply written so far."""
    from enlace_data.chat import render

    first = next(i for i, m in enumerate(conversation["messages"]) if m["role"] == "assistant")
    messages = conversation["messages"][: first + 1]
    ids = render(messages, tokenizer, tools=conversation["tools"]).ids
    # Character offsets of every id in the decoded text (specials decode to their own text).
    ends = [len(tokenizer.decode(ids[: i + 1])) for i in range(len(ids))]
    text = tokenizer.decode(ids)
    request = messages[first - 1]["content"]
    start = text.rindex(request)
    action = text.index('"accion": "', start) + len('"accion": "')
    tools = (text.find("<tools>"), text.find("</tools>"))
    cut = next(i for i, end in enumerate(ends) if end > action)  # the action's first token
    labels = []
    for i in range(cut):
        begin = ends[i - 1] if i else 0
        if i >= cut - RECENT:
            labels.append("recent")
        elif start <= begin < start + len(request):
            labels.append("request")
        elif tools[0] <= begin < tools[1]:
            labels.append("tools")
        else:
            labels.append("prompt" if begin < start else "reply")
    return ids[:cut], labels


@contextmanager
def recorded_attention() -> Iterator[list[Tensor]]:
    """Every layer's attention probabilities (batch 1: heads x T x T) of the forward calls made
    inside, computed as SDPA's math kernel does (causal, scale 1/sqrt(head_dim))."""
    import torch
    from enlace_model.model import Attention

    probs: list[Tensor] = []

    def sdpa(self: Attention, q: Tensor, k: Tensor, v: Tensor, mask: Any, *_: Any) -> Tensor:
        if mask is not None:  # packed rows need their segments; this reads one conversation
            raise ValueError("recorded_attention reads one conversation at a time (no mask)")
        group = self.n_heads // self.n_kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        future = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).triu(1)
        p = scores.masked_fill(future, float("-inf")).softmax(-1)
        probs.append(p[0])
        return p @ v

    original = Attention._sdpa
    Attention._sdpa = sdpa  # type: ignore[method-assign]
    try:
        yield probs
    finally:
        Attention._sdpa = original  # type: ignore[method-assign]


def attention_mass(model: Any, tokenizer: Any, convs: list[dict]) -> Tensor:
    """Mean attention mass (layers x heads x REGIONS) from the position that writes the action."""
    import torch

    total = None
    for conversation in convs:
        ids, labels = regions_of(conversation, tokenizer)
        with recorded_attention() as probs, torch.no_grad():
            model(torch.tensor([ids]))
        rows = torch.stack([p[:, -1, :] for p in probs])  # (layers, heads, T): the last position
        masks = torch.tensor([[label == r for label in labels] for r in REGIONS], dtype=rows.dtype)
        mass = rows @ masks.T  # (layers, heads, REGIONS)
        total = mass if total is None else total + mass
    assert total is not None, "no conversations"
    return total / len(convs)


def attention(run: str, data: Path, n: int) -> Tensor:
    """`attention_mass` of a run on its first n held-out requests."""
    import torch
    from enlace_data.tokenizer import load_tokenizer
    from enlace_model.checkpoint import load_model, resolve_checkpoint

    checkpoint = resolve_checkpoint(run)
    model, tokenizer = load_model(checkpoint, dtype=torch.float32), load_tokenizer(checkpoint)
    model.eval()
    convs = [json.loads(line) for line in (data / "val.jsonl").open(encoding="utf-8")][:n]
    return attention_mass(model, tokenizer, convs)


def copy_pairs(
    conversation: dict, tokenizer: Any, first_bytes: bool = False
) -> tuple[list[int], list[tuple[int, int]]]:
    """The ids of the conversation through its first call, and for each byte (after the first)
    of the entities the call must carry (`expect.memory` or `expect.query`): the position that
    predicts it in the call, and the position of the same byte in the request. An induction head,
    the mechanism of copying, attends from the first to the second. `first_bytes`: each entity's
    first byte only, the one no byte of the name points to: finding it takes the bytes before the
    name («se llama »), several bytes of key where the later ones need one."""
    from enlace_data.chat import render

    first = next(i for i, m in enumerate(conversation["messages"]) if m["role"] == "assistant")
    messages = conversation["messages"][: first + 1]
    ids = render(messages, tokenizer, tools=conversation.get("tools")).ids
    ends = [len(tokenizer.decode(ids[: i + 1])) for i in range(len(ids))]
    text = tokenizer.decode(ids)
    request = messages[first - 1]["content"]
    # The call first: a query may be the request itself (enlace_data's search_query), so the
    # request's last occurrence can be inside the call. Specials may decode to nothing.
    call = text.rindex('"arguments"')
    start = text.rindex(request, 0, call)
    expect = conversation.get("expect") or {}
    pairs = []
    for entity in [*expect.get("memory", ()), *expect.get("query", ())]:
        source, copy = request.find(entity), text.find(entity, call)
        if source < 0 or copy < 0:
            continue  # the reference itself rewords it: nothing to copy byte for byte
        for j in range(1) if first_bytes else range(1, len(entity)):
            target = next(i for i, end in enumerate(ends) if end > start + source + j)
            predicted = next(i for i, end in enumerate(ends) if end > copy + j)
            pairs.append((predicted - 1, target))
    return ids, pairs


def record_pairs(seed: int = 1, length: int = 128) -> tuple[list[int], list[tuple[int, int]]]:
    """A row of letter records («qwhfk|qwhfk», `enlace_data.copy_records`, what pretraining mixes
    in and `copy_probe.py` scores) and its pairs as `copy_pairs` gives them for names: for each
    copied byte after the first, the position that predicts it and the same byte's source."""
    from enlace_data.copy_records import LOWER_CASE, copy_record_row

    # The lower case alone, as in every session's figures (copy_probe.py scores capitals and
    # digits apart).
    row, spans = copy_record_row(random.Random(seed), length, letters=LOWER_CASE)
    pairs = []
    for start, end in spans:
        source = start - (end - start) - 1  # «A|A»: the copy starts one past the separator
        pairs += [(start + j - 1, source + j) for j in range(1, end - start)]
    return list(row), pairs


def recall_pairs(seed: int = 1, length: int = 128) -> tuple[list[int], list[tuple[int, int]]]:
    """A row of recall records («ab=qwhf cd=zmu|cd=zmu ab=qwhf», `enlace_data.copy_records`) and,
    for each value after the «|», the pair (the «=» that predicts its first byte, that byte in the
    first half): the byte found only by matching the key's several bytes, as a name's first."""
    from enlace_data.copy_records import LOWER_CASE, recall_record_row

    row, spans = recall_record_row(random.Random(seed), length, LOWER_CASE)
    pairs = []
    for start, end in spans:
        source = row.rfind(row[start - 3 : end], 0, start - 3) + 3  # «cd=zmu» in the first half
        pairs.append((start - 1, source))
    return list(row), pairs


def copy_attention(probs: list[Tensor], pairs: list[tuple[int, int]]) -> Tensor:
    """Mean attention (layers x heads) from each pair's predicting position to its source."""
    import torch

    queries = torch.tensor([q for q, _ in pairs])
    targets = torch.tensor([t for _, t in pairs])
    return torch.stack([p[:, queries, targets].mean(-1) for p in probs])


def key_needed(ids: list[int], q: int, longest: int = 64) -> int | None:
    """The fewest tokens ending at q that say where the token after them, ids[q + 1], stood
    before: every earlier occurrence of those tokens is followed by it. An induction head keyed
    on that many tokens copies it; one keyed on fewer may copy what followed another occurrence
    («de » before «tren» and before «Antequera»). None when it never followed them (not a copy)
    or no key up to `longest` tells."""
    target = ids[q + 1]
    for k in range(1, min(longest, q + 1) + 1):
        key = ids[q - k + 1 : q + 1]
        after = {ids[m + 1] for m in range(k - 1, q) if ids[m - k + 1 : m + 1] == key}
        if target not in after:
            return None
        if after == {target}:
            return k
    return None


KEY_BUCKETS = ("1", "2", "3", "4", "5", "6+")


def accuracy_by_key(
    rows: list[tuple[list[int], list[tuple[int, int]]]], guesses: list[list[int]]
) -> dict[str, tuple[int, int]]:
    """(right, count) of the copied bytes of `rows` (`copy_pairs`) by the key each needs
    (`key_needed`: 1 to 5 tokens, or 6 and more), given each row's predicted next tokens."""
    tally = dict.fromkeys(KEY_BUCKETS, (0, 0))
    for (ids, pairs), guessed in zip(rows, guesses, strict=True):
        for q, _ in pairs:
            k = key_needed(ids, q)
            if k is None:
                continue
            bucket = KEY_BUCKETS[min(k, len(KEY_BUCKETS)) - 1]
            right, count = tally[bucket]
            tally[bucket] = (right + (guessed[q] == ids[q + 1]), count + 1)
    return tally


def copying(
    model: Any, rows: list[tuple[list[int], list[tuple[int, int]]]]
) -> tuple[float, Tensor, int, dict[str, tuple[int, int]]]:
    """Teacher-forced on rows of ids with their (predicting, source) pairs (`copy_pairs` of chat
    conversations, `record_pairs`): the share of the copied bytes the model predicts right, each
    layer's heads' mean attention on the byte's source (`copy_attention`), the bytes' count, and
    (right, count) by the key each byte needs (`accuracy_by_key`; bytes that never followed their
    key, none)."""
    import torch

    right, total, weighted = 0, 0, None
    used, guessed = [], []
    for ids, pairs in rows:
        if not pairs:
            continue
        with recorded_attention() as probs, torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0]
        guesses = logits.argmax(-1).tolist()
        right += sum(guesses[q] == ids[q + 1] for q, _ in pairs)
        mass = copy_attention(probs, pairs) * len(pairs)
        weighted = mass if weighted is None else weighted + mass
        total += len(pairs)
        used.append((ids, pairs))
        guessed.append(guesses)
    assert weighted is not None, "no row has a byte to copy"
    return right / total, weighted / total, total, accuracy_by_key(used, guessed)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("data", help="write the shopping-list requests")
    d.add_argument("out", type=Path)
    d.add_argument("--tools", type=Path, required=True, help="enlace-assistant --tools-json")
    d.add_argument("--conversations", type=int, default=4000)
    d.add_argument("--request-only", action="store_true", help="no system prompt, no tools")
    d.add_argument(
        "--short-share", type=float, default=0.0, help="this share of train requests only"
    )
    s = sub.add_parser("score", help="per-action accuracy of a fine-tuned run")
    s.add_argument("run")
    s.add_argument("data", type=Path)
    s.add_argument("--requests", type=int, default=200)
    c = sub.add_parser(
        "choice", help="right tool and action on a chat set's held-out household requests"
    )
    c.add_argument("run")
    c.add_argument("data", type=Path, help="a chat data directory (the script's runs/chat-data)")
    k = sub.add_parser("copying", help="are the request's names copied into the call, and how")
    k.add_argument("run")
    k.add_argument("data", type=Path, help="a chat data directory (the script's runs/chat-data)")
    k.add_argument("--conversations", type=int, default=40)
    a = sub.add_parser("attention", help="where the position writing the action looks")
    a.add_argument("run")
    a.add_argument("data", type=Path)
    a.add_argument("--requests", type=int, default=20)
    args = parser.parse_args()
    if args.command == "data":
        n = args.conversations
        write_data(
            args.out,
            args.tools,
            n,
            max(1, n // 10),
            request_only=args.request_only,
            short_share=args.short_share,
        )
        print(f"wrote {args.out}/train.jsonl and val.jsonl")
        return
    if args.command == "attention":
        mass = attention(args.run, args.data, args.requests)
        print(f"{args.run}: attention mass from the position writing the action")
        print("layer head " + " ".join(f"{r:>8}" for r in REGIONS))
        for layer, heads in enumerate(mass.tolist()):
            for head, row in enumerate(heads):
                print(f"{layer:5} {head:4} " + " ".join(f"{x:8.3f}" for x in row))
        print(f"most on the request, any head: {mass[..., 0].max():.3f}")
        return
    if args.command == "copying":
        import torch
        from enlace_data.tokenizer import load_tokenizer
        from enlace_model.checkpoint import load_model, resolve_checkpoint

        checkpoint = resolve_checkpoint(args.run)
        model = load_model(checkpoint, dtype=torch.float32).eval()
        convs = [c for c in _held_out(args.data) if c.get("expect")][: args.conversations]
        tokenizer = load_tokenizer(checkpoint)
        rows = {
            "the request's names and facts in the reference calls": [
                copy_pairs(c, tokenizer) for c in convs
            ],
            "the first bytes of those names and facts": [
                copy_pairs(c, tokenizer, first_bytes=True) for c in convs
            ],
            "letter records (copy_probe.py's)": [record_pairs(seed) for seed in range(20)],
            "recall records' values, first bytes": [recall_pairs(seed) for seed in range(40)],
        }
        for what, pairs in rows.items():
            pairs = [r for r in pairs if len(r[0]) <= model.cfg.context_length]
            if not any(p for _, p in pairs):
                print(f"{args.run}: {what}: none fits the model's context")
                continue
            accuracy, mass, n, by_key = copying(model, pairs)
            best = divmod(int(mass.argmax()), mass.shape[1])
            print(
                f"{args.run}: {n} bytes of {what}: {accuracy:.1%} predicted right "
                f"(teacher-forced); most attention on the byte's source, any head: "
                f"{mass.max():.3f} (layer, head {best})"
            )
            keys = "  ".join(f"{k}: {r}/{c}" for k, (r, c) in by_key.items() if c)
            print(f"  by the key each byte needs (tokens before it that say where it was): {keys}")
        return
    if args.command == "choice":
        convs = household_requests(_held_out(args.data))
        calls = first_calls(args.run, convs)
        rows = choice(convs, calls)
        print(f"{args.run}: first calls on {len(convs)} held-out household requests")
        misses = Counter[str]()
        for conversation, reply_calls in zip(convs, calls, strict=True):
            first = next(m for m in conversation["messages"] if m["role"] == "assistant")
            expected = household_call(first["tool_calls"][0]["function"])
            got = household_call(reply_calls[0]) if reply_calls else "no call"
            if got != expected and misses[expected] < 3:  # a few misses, to see what it answers
                misses[expected] += 1
                asked = next(m for m in conversation["messages"] if m["role"] == "user")
                print(f"  {asked['content']!r}: {got}")
        print(f"{'reference call':26} {'right tool':>10} {'and action':>10}")
        for k, (tool, both, n) in rows.items():
            print(f"{k:26} {tool:>5} / {n:<3} {both:>5} / {n:<3}")
        tool, both = (sum(r[i] for r in rows.values()) for i in (0, 1))
        print(f"{'all':26} {tool:>5} / {len(convs):<3} {both:>5} / {len(convs):<3}")
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
