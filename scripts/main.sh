#!/usr/bin/env bash
# The main job: install what is missing, build, and run orbit end to end on the bundled model.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

orbit_install_packages
orbit_build -DORBIT_TESTS=OFF

ORBIT="$ORBIT_BUILD/cli/orbit"
MODEL="$ORBIT_ROOT/models/stories260K/stories260K.bin"
OUT="$ORBIT_ROOT/out"
mkdir -p "$OUT"

step "orbit info --model models/stories260K/stories260K.bin"
"$ORBIT" info --model "$MODEL"

step "orbit logits: next-token logits after the prompt 1,403,407,261 (written to out/logits.json)"
"$ORBIT" logits --model "$MODEL" --tokens 1,403,407,261 > "$OUT/logits.json"
/usr/bin/python3 - "$OUT/logits.json" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
row = data["logits"][-1]
top = sorted(range(len(row)), key=lambda i: -row[i])[:5]
print("tokens", data["tokens"], "-> top-5 next token ids:", ", ".join(f"{i} ({row[i]:.3f})" for i in top))
PY

step "orbit make-model --preset tiny-qwen2 (a random Qwen2-shaped model, bf16, 2 shards) -> out/tiny-qwen2"
"$ORBIT" make-model --preset tiny-qwen2 --dtype bfloat16 --shard-mb 1 --force --out "$OUT/tiny-qwen2"
"$ORBIT" info --model "$OUT/tiny-qwen2"

step "Done. Outputs are in $OUT (logits.json, tiny-qwen2/). The CLI is $ORBIT; run '$ORBIT --help'."
