#!/usr/bin/env bash
# Prepare the smoke corpus (data/smoke/train.txt and val.txt) — a thin wrapper over
# `enlace-data smoke`, kept for those used to the old command. Arguments pass through, e.g.
#   scripts/prepare_smoke_data.sh                       # download the pinned Gutenberg books
#   scripts/prepare_smoke_data.sh --from ../shared/data/es-pd   # local copies, no network
# data/smoke is relative to the working directory (run it from the repository root).
set -euo pipefail
exec uv run --project "$(dirname "$0")/.." enlace-data smoke "$@"
