#!/usr/bin/env bash
# The exporter's command line against a user's mistakes (tools/overlap_export/testing/
# cli_test.py): a model calling sys.exit or raising names the step; bad -o prefixes,
# --input strings and --kwargs are usage errors before the model loads; outputs are written
# all or none, devices and FIFOs in place, links kept; compare's bad files give one line.
# Skips without torch, as export_test does, unless OVERLAP_REQUIRE_TORCH=1.
set -euo pipefail
source "$PWD/tools/require_torch.sh"
require_torch export_cli_test "import torch, functorch"
cd "$PWD/tools"
py="$OVERLAP_PY"
export TMPDIR=${TEST_TMPDIR:-${TMPDIR:-/tmp}}
exec "$py" -m unittest overlap_export.testing.cli_test -v
