#!/usr/bin/env bash
# The main job: install what is missing, build (with the Python module), and run the video-agent sample end
# to end on the bundled model; it ends by pointing at the sample's outputs (table, report, trace, chart).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

orbit_install_packages
# The same compile flags as scripts/test.sh (warnings as errors), so that running the tests after the main
# job builds only the tests, not everything again.
orbit_build -DORBIT_TESTS=OFF -DORBIT_PYTHON=ON -DORBIT_WERROR=ON

PYTHON=/usr/bin/python3
MODEL="$ORBIT_ROOT/models/stories260K/stories260K.bin"
OUT="$ORBIT_ROOT/out/video-agent"
export PYTHONPATH="$ORBIT_BUILD/bindings/python${PYTHONPATH:+:$PYTHONPATH}"

step "The model: orbit info --model models/stories260K/stories260K.bin"
"$ORBIT_BUILD/cli/orbit" info --model "$MODEL"

step "Text in, text out: orbit generate --model models/stories260K/stories260K.bin --prompt \"Once upon a time\" --temperature 0"
printf 'Once upon a time'
"$ORBIT_BUILD/cli/orbit" generate --model "$MODEL" --prompt "Once upon a time" --max-tokens 40 --temperature 0

step "The video agent (samples/video-agent): one clip's frames re-examined under changing prompts"
"$PYTHON" "$ORBIT_ROOT/samples/video-agent/video_agent.py" --model "$MODEL" --out "$OUT"

step "Done. The video agent's outputs:"
cat <<MSG
  summary table  $OUT/video-agent.table.txt
  report (JSON)  $OUT/video-agent.report.json
  trace          $OUT/video-agent.trace.json   (orbit-trace/1: $ORBIT_BUILD/cli/orbit replay <trace> --model <model>)
  chart          $OUT/video-agent.png          (forward tokens and ms per step vs. a radix cache and no cache; KL and top-1)
Also: $PYTHON samples/web-agent/web_agent.py (out/web-agent/), $ORBIT_BUILD/samples/cpp/quickstart,
and PYTHONPATH=$ORBIT_BUILD/bindings/python $PYTHON -c 'import orbit' for your own scripts.
MSG
