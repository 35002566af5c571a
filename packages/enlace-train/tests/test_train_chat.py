"""Chat fine-tuning as a configuration of the trainer (data.kind chat, init_from a base run), its
evaluation (turn endings, tool calls), exact resume, and the terminal chat."""

from __future__ import annotations

import shutil

from enlace_data.tokenizer import ByteTokenizer
from enlace_model import build_model
from enlace_train.chat import ChatSession, Sampling, run_terminal
from enlace_train.trainer import train

CHAT_MODEL = {"vocab_size": 264, "context_length": 512}
CHAT_DATA = {
    "kind": "chat",
    "path": "no-such-dir",
    "fallback": "builtin",
    "context_length": 512,
    "overflow": "truncate",
    "eval_batches": 2,
    "builtin_conversations": 100,
    "chat_eval_conversations": 6,
    "chat_eval_max_tokens": 24,
}


def _sft(write_run, h, name: str, base_dir, **train_extra):
    path = write_run(
        name,
        model=CHAT_MODEL,
        data=CHAT_DATA,
        train={"init_from": str(base_dir), "max_steps": 6, "eval_every": 3, "checkpoint_every": 3}
        | train_extra,
    )
    return path


def test_sft_from_a_base_run_logs_chat_measures_and_resumes_exactly(write_run, h):
    base_train = {"max_steps": 2, "warmup_steps": 0, "decay_steps": 1, "eval_every": 2}
    base = train(h.load(write_run("base", model=CHAT_MODEL, train=base_train))).run_dir
    path = _sft(write_run, h, "sft", base)
    straight = train(h.load(path)).run_dir
    rows = h.metrics_rows(straight)
    chat = [r for r in rows if "chat_turn_end" in r]
    assert [r["step"] for r in chat] == [3, 6]
    for r in chat:
        assert 0.0 <= r["chat_turn_end"] <= 1.0 and r["chat_eval_conversations"] == 6
        assert r["chat_tool_call"] is None or 0.0 <= r["chat_tool_call"] <= 1.0
        for key in ("chat_argument_fidelity", "chat_grounded", "chat_invention"):
            assert r[key] is None or 0.0 <= r[key] <= 1.0
    assert "arguments" in (straight / "train.log").read_text()  # the terminal line names them
    assert [r["step"] for r in rows if "val_loss" in r] == [3, 6]
    log = (straight / "train.log").read_text()
    assert "built-in conversation set" in log and "initialised from" in log

    # Killed after the step-3 checkpoint and rerun: the same losses and the same final weights.
    final = straight / "checkpoints" / "step_6"
    weights, losses = (final / "model.safetensors").read_bytes(), _losses(rows)
    shutil.rmtree(final)
    train(h.load(path))
    assert (final / "model.safetensors").read_bytes() == weights
    assert _losses(h.metrics_rows(straight)) == losses


def test_sft_with_the_copies_weighing_more_trains_on_other_losses_and_resumes_exactly(write_run, h):
    """data.copied_weight 4: the same SFT's logged losses change (the steps differ) while its
    validation loss stays the plain mean; killed after the step-3 checkpoint and rerun, the same
    final weights."""
    base_train = {"max_steps": 2, "warmup_steps": 0, "decay_steps": 1, "eval_every": 2}
    base = train(h.load(write_run("base", model=CHAT_MODEL, train=base_train))).run_dir
    plain = h.metrics_rows(train(h.load(_sft(write_run, h, "plain", base))).run_dir)
    path = write_run(
        "weighed",
        model=CHAT_MODEL,
        data=CHAT_DATA | {"copied_weight": 4.0},
        train={"init_from": str(base), "max_steps": 6, "eval_every": 3, "checkpoint_every": 3},
    )
    run = train(h.load(path)).run_dir
    rows = h.metrics_rows(run)
    assert _losses(rows)[0] == _losses(plain)[0]  # the first step's: the same weights, plain mean
    assert _losses(rows)[1:] != _losses(plain)[1:]
    final = run / "checkpoints" / "step_6"
    weights = (final / "model.safetensors").read_bytes()
    shutil.rmtree(final)
    train(h.load(path))
    assert (final / "model.safetensors").read_bytes() == weights


def _losses(rows):
    return [r["loss"] for r in rows if "loss" in r]


def _session(context: int = 96, max_new: int = 40, **kw) -> ChatSession:
    from enlace_config.schema.model import ModelConfig

    cfg = ModelConfig(
        vocab_size=264,
        context_length=context,
        d_model=32,
        n_layers=1,
        n_heads=2,
        n_kv_heads=1,
        ffn_hidden=64,
    )
    model = build_model(cfg).eval()
    return ChatSession(
        model, ByteTokenizer(), sampling=Sampling(seed=3, max_new_tokens=max_new), **kw
    )


def test_chat_history_never_outgrows_the_context() -> None:
    session = _session(system="Eres Enlace, un asistente que responde siempre en español.")
    streamed: list[str] = []
    for i in range(12):  # far more than 96 tokens of conversation
        answer = session.reply(
            f"Mensaje número {i} con bastante texto para llenar", streamed.append
        )
        assert "".join(streamed) == answer
        streamed.clear()
        assert len(session.prompt()) <= session.model.cfg.context_length
    session.reply("x" * 500)  # one message longer than the context: its latest tokens are kept
    assert len(session.history) == 2 * 13
    session.reset()
    assert session.history == []


def test_terminal_loop_reset_and_exit(capsys) -> None:
    session = _session()
    lines = iter(["Hola", "/reset", "¿Qué tal?", "/salir", "nunca leído"])
    run_terminal(session, lambda prompt: next(lines))
    out = capsys.readouterr().out
    assert out.count("enlace> ") == 2 and "(conversación nueva)" in out
    assert [m["content"] for m in session.history if m["role"] == "user"] == ["¿Qué tal?"]


def test_same_seed_same_replies() -> None:
    a, b = _session(), _session()
    b.model.load_state_dict(a.model.state_dict())
    assert [a.reply("Hola"), a.reply("Otra")] == [b.reply("Hola"), b.reply("Otra")]
