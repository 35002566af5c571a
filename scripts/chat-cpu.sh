#!/usr/bin/env bash
# From nothing to a chat on 2 CPU cores (like nanochat's CPU run): the byte-level smoke model is
# pretrained (configs/runs/smoke-cpu.yaml), fine-tuned on the built-in Spanish conversations
# (configs/runs/sft-cpu.yaml, which also measures turn endings and tool calls on held-out ones),
# and then you talk to it in the terminal. Re-running resumes or skips finished stages.
# Arguments go to the chat: scripts/chat-cpu.sh --system "Eres Enlace." --temperature 0.5
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
uv run enlace-train configs/runs/smoke-cpu.yaml
uv run enlace-train configs/runs/sft-cpu.yaml
echo "base + chat fine-tuning: $(( (SECONDS - start) / 60 )) min $(( (SECONDS - start) % 60 )) s"
grep '"chat_turn_end"' runs/sft-cpu/metrics.jsonl | tail -1
exec uv run enlace-train chat runs/sft-cpu "$@"
