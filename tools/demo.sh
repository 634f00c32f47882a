#!/usr/bin/env bash
# The README's first command: installs what is missing, builds overlap, and runs the demo
# on the built-in default model (gpt2). Extra arguments go to `overlap demo`
# (e.g. `tools/demo.sh llama-70b --lifted`).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/bootstrap.sh
bazel run --ui_event_filters=-info,-stdout,-stderr --noshow_progress //:overlap -- demo "$@"
