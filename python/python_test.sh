#!/usr/bin/env bash
# overlap's Python package from overlap's environment: python/python_test.py, or with
# `docs` the examples of docs/torch.md (python/docs_test.py). Skips without torch, as the
# other torch tests do, unless OVERLAP_REQUIRE_TORCH=1.
set -euo pipefail
source "$PWD/tools/require_torch.sh"
require_torch python_test "import torch"
export PYTHONPATH="$PWD/python:$PWD/tools"
if [ "${1:-}" = docs ]; then
  exec "$OVERLAP_PY" "$PWD/python/docs_test.py" "$PWD/docs/torch.md"
fi
exec "$OVERLAP_PY" "$PWD/python/python_test.py"
