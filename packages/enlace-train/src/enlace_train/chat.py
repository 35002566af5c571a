"""`enlace-train chat RUN_OR_CHECKPOINT`: talk to a chat model in the terminal.

The conversation is rendered in Enlace's chat format (enlace_data.chat) with the checkpoint's own
tokenizer, the reply is streamed token by token and ends at <|im_end|> (or at the token limit).
When the conversation no longer fits the model's context, the oldest turns are left out (the system
prompt stays); a single message longer than the context keeps its most recent tokens, so there is
never a "prompt exceeds context" error. `/reset` forgets the conversation, `/salir` (or Ctrl-D)
ends it.

It lives in enlace-train, beside `sample`, because it needs both the model (enlace-model) and the
renderer and tokenizer (enlace-data), and enlace-model never imports enlace-data.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from enlace_data.chat import render
from enlace_data.tokenizer import load_tokenizer
from enlace_data.tokenizer.special_tokens import IM_END
from enlace_model import generate_stream
from enlace_model.checkpoint import load_model, resolve_checkpoint


@dataclass
class Sampling:
    temperature: float = 0.7
    top_p: float | None = 0.9
    seed: int | None = None
    max_new_tokens: int = 256


@dataclass
class ChatSession:
    """A conversation with a model: history, prompt building that always fits, streamed replies."""

    model: Any
    tokenizer: Any
    system: str | None = None
    sampling: Sampling = field(default_factory=Sampling)
    history: list[dict[str, Any]] = field(default_factory=list)
    turns: int = 0  # replies so far: each gets its own seed (seed + turn)

    def reset(self) -> None:
        self.history.clear()

    def _budget(self) -> tuple[int, int]:
        """(prompt tokens allowed, new tokens) within the context: at least a quarter of the
        context is kept for the reply."""
        context = self.model.cfg.context_length
        new = max(1, min(self.sampling.max_new_tokens, context - context // 4, context - 1))
        return context - new, new

    def prompt(self) -> list[int]:
        """The rendered conversation plus the assistant header, trimmed to fit (see module doc)."""
        room, _ = self._budget()
        system = [{"role": "system", "content": self.system}] if self.system else []
        turns = list(self.history)
        while True:
            ids = render(system + turns, self.tokenizer, add_generation_prompt=True).ids
            if len(ids) <= room:
                return ids
            if len(turns) > 1:
                turns = turns[1:]
                while turns and turns[0]["role"] != "user":  # start at a user turn
                    turns = turns[1:]
                if turns:
                    continue
                turns = [self.history[-1]]
            if system and len(render(system, self.tokenizer).ids) > room // 2:
                system = []  # a huge system prompt gives way before the user's message
                continue
            return ids[-room:]  # one message longer than the context: its most recent tokens

    def reply(self, text: str, stream: Callable[[str], None] = lambda s: None) -> str:
        """Answer `text`, calling `stream` with each printable piece as it is generated."""
        self.history.append({"role": "user", "content": text})
        ids = self.prompt()
        _, new = self._budget()
        new = min(new, self.model.cfg.context_length - len(ids))
        s, out, shown = self.sampling, [], ""
        for step in generate_stream(
            self.model,
            [ids],
            new,
            temperature=s.temperature,
            top_p=s.top_p,
            stop_tokens=[self.tokenizer.special_ids[IM_END]],
            seed=None if s.seed is None else s.seed + self.turns,
        ):
            token = step[0]
            if token is None:
                break
            out.append(token)
            text_so_far = self.tokenizer.decode(out)
            if not text_so_far.endswith("\ufffd"):  # not in the middle of a UTF-8 character
                stream(text_so_far[len(shown) :])
                shown = text_so_far
        answer = self.tokenizer.decode(out)
        stream(answer[len(shown) :])
        self.turns += 1
        self.history.append({"role": "assistant", "content": answer.strip() or "…"})
        return answer


def open_session(path: str, *, system: str | None, sampling: Sampling) -> ChatSession:
    checkpoint = resolve_checkpoint(path)
    model = load_model(checkpoint, device="cpu", dtype=torch.float32)
    tokenizer = load_tokenizer(checkpoint)
    if IM_END not in tokenizer.special_ids:
        raise ValueError(f"{checkpoint}: its tokenizer has no chat tokens; train a chat run first")
    return ChatSession(model, tokenizer, system, sampling)


def run_terminal(session: ChatSession, read: Callable[[str], str] = input) -> None:
    """The loop: read a line, answer it streamed; /reset, /salir or end of input."""
    print("Escribe tu mensaje (/reset empieza de nuevo, /salir termina).", flush=True)
    while True:
        try:
            line = read("tú> ").strip()
        except EOFError:
            print()
            return
        if not line:
            continue
        if line in ("/salir", "/exit", "/quit"):
            return
        if line == "/reset":
            session.reset()
            print("(conversación nueva)", flush=True)
            continue
        print("enlace> ", end="", flush=True)
        session.reply(line, lambda piece: print(piece, end="", flush=True))
        print(flush=True)


def chat_main(args: Any) -> None:
    sampling = Sampling(args.temperature, args.top_p, args.seed, args.max_new_tokens)
    session = open_session(args.checkpoint, system=args.system, sampling=sampling)
    run_terminal(session, input if sys.stdin.isatty() else _read_piped)


def _read_piped(prompt: str) -> str:
    print(prompt, end="", flush=True)
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    print(line.rstrip("\n"))
    return line
