#!/usr/bin/env bash
# The pictures render: partition --dot through Graphviz's dot -Tsvg, and schedule / simulate
# --svg, every SVG parsed by Python's xml.etree (overlap's Python environment, or any python3), on every
# built-in model's tiny preset; a graph over the DOT limit is refused with the limit named.
set -euo pipefail
source "$PWD/tools/python.sh"
overlap=tools/overlap
if ! command -v dot >/dev/null; then
  echo "pictures_test: Graphviz's dot is missing: run tools/bootstrap.sh (installs graphviz)" >&2
  exit 1
fi
tmp=${TEST_TMPDIR:-$(mktemp -d)}
parse() {  # parse FILE: well-formed SVG with a root <svg> element
  "$OVERLAP_STDLIB_PY" - "$1" <<'PY'
import sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == "{http://www.w3.org/2000/svg}svg", root.tag
print("parsed", sys.argv[1].rsplit("/", 1)[-1], sum(1 for _ in root.iter()), "elements")
PY
}
for model in mlp gpt2 llama-7b llama-70b resnet18 moe; do
  $overlap gen "$model" --preset tiny -o "$tmp/$model.json"
  $overlap partition "$tmp/$model.json" --bucket-cap 4KiB --dot "$tmp/$model.dot" >/dev/null
  grep -q "subgraph cluster_" "$tmp/$model.dot"
  dot -Tsvg "$tmp/$model.dot" -o "$tmp/$model.dot.svg"
  parse "$tmp/$model.dot.svg"
  $overlap gen "$model" --preset tiny --lifted -o "$tmp/$model.fwd.json"
  $overlap gen "$model" --preset tiny --backward -o "$tmp/$model.bwd.json"
  $overlap schedule "$tmp/$model.fwd.json" --svg "$tmp/$model.fwd.svg" --memory-limit 1GiB \
    -o "$tmp/$model.fwd.sched.json" >/dev/null
  parse "$tmp/$model.fwd.svg"
  grep -q "budget 1.00 GiB" "$tmp/$model.fwd.svg"
  $overlap schedule "$tmp/$model.bwd.json" --backward --algorithm fast_free \
    --svg "$tmp/$model.bwd.svg" >/dev/null
  parse "$tmp/$model.bwd.svg"
  $overlap simulate "$tmp/$model.fwd.sched.json" --svg "$tmp/$model.sim.svg" >/dev/null
  parse "$tmp/$model.sim.svg"
done
# Over the DOT limit: exit 1, the limit in the message, no file.
$overlap gen llama-70b -o "$tmp/big.json"
if $overlap partition "$tmp/big.json" --dot "$tmp/big.dot" 2>"$tmp/err" >/dev/null; then
  echo "pictures_test: a graph over the DOT limit was drawn" >&2
  exit 1
fi
grep -q "over the DOT limit of 2000" "$tmp/err"
test ! -e "$tmp/big.dot"
echo "pictures_test: all pictures render"
