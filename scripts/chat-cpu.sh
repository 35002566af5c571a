#!/usr/bin/env bash
# From nothing to a chat on 2 CPU cores (like nanochat's CPU run): the byte-level smoke model is
# pretrained with copy records (configs/runs/smoke-cpu-copy.yaml), warmed up on the household's
# requests, searches and plain questions alone (configs/runs/warmup-cpu.yaml: short prompts, where
# it learns to read the request and copy from it and from the result, and that a question without
# a request calls no tool; copy records still in its rows), fine-tuned
# on the built-in Spanish conversations (configs/runs/sft-cpu.yaml, which also takes the chat
# measures on held-out ones) that offer the assistant's own tool specs
# (`enlace-assistant --tools-json`), and then you talk to it in the terminal. Re-running resumes or
# skips finished stages.
#
#   scripts/chat-cpu.sh [--runs DIR] [--seed S] [--float32] [--long] [--no-chat] [chat options]
#
# --runs DIR puts the runs under DIR (default runs/); --seed S sets train.seed of every run (the
# benchmarks' medians over seeds); --long is the longer recipe (not CI's: the *-long.yaml twins of
# the three runs, the base's records beside its book rows, 700 steps with «A B A» rows in the
# second half, and 360 fine-tuning steps of 5 rows, into DIR/*-long; ~25 min), whose base also
# meets issue 35's bits-per-byte, letters and books' gap targets (benchmarks/CHAT.md, twenty-fifth
# session; in float32, as measured); --float32 trains the three runs
# in float32, for a CPU without bfloat16 instructions (AVX512-BF16 or AMX), where enlace-train
# refuses configs/hardware/cpu-bf16.yaml (1.20x slower on CI's cores); --no-chat
# stops after training (CI's chat stage exports the result to GGUF and serves it to the
# assistant). Other arguments go to the chat:
# scripts/chat-cpu.sh --system "Eres Enlace." --temperature 0.5
set -euo pipefail
cd "$(dirname "$0")/.."
runs=runs
chat=1
long=""
seed=()
dtype=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --seed) seed=("train.seed=$2"); shift 2 ;;
    --float32) dtype=("hardware.dtype=float32"); shift ;;
    --long) long=-long; shift ;;
    --no-chat) chat=0; shift ;;
    *) break ;;
  esac
done
start=$SECONDS
base=smoke-cpu-copy$long warmup=warmup-cpu$long sft=sft-cpu$long
uv run enlace-train "configs/runs/$base.yaml" "run.out_dir=$runs/$base" ${seed[@]+"${seed[@]}"} \
  ${dtype[@]+"${dtype[@]}"}
# The conversations offer the model the very tool specs the assistant sends with every question.
uv run enlace-assistant --tools-json > "$runs/assistant-tools.json"
# The warm-up's set: requests, a third of the rest short searches, and a fifth plain questions
# answered without a tool (5,000: the 4,000 requests and searches of before, and ~1,000 of them).
uv run enlace-data chat builtin "$runs/warmup-data" --tools "$runs/assistant-tools.json" \
  --household-requests --searches 0.3 --plain 0.2 --builtin-size 5000
uv run enlace-train "configs/runs/$warmup.yaml" "train.init_from=$runs/$base" \
  "data.path=$runs/warmup-data" "run.out_dir=$runs/$warmup" ${seed[@]+"${seed[@]}"} \
  ${dtype[@]+"${dtype[@]}"}
uv run enlace-data chat builtin "$runs/chat-data" --tools "$runs/assistant-tools.json"
uv run enlace-train "configs/runs/$sft.yaml" "train.init_from=$runs/$warmup" \
  "data.path=$runs/chat-data" "run.out_dir=$runs/$sft" ${seed[@]+"${seed[@]}"} \
  ${dtype[@]+"${dtype[@]}"}
echo "base + warm-up + chat fine-tuning: $(( (SECONDS - start) / 60 )) min $(( (SECONDS - start) % 60 )) s"
# The last chat evaluation: turn endings, tool calls, argument fidelity, grounded answers, invention,
# spurious calls, memory fidelity, spurious memory writes (enlace_train/chat_eval.py; `enlace-train
# eval-chat` takes them for any checkpoint).
grep ' | chat: ' "$runs/$sft/train.log" | tail -1
[ "$chat" -eq 1 ] || exit 0
exec uv run enlace-train chat "$runs/$sft" "$@"
