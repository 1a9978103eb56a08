#!/usr/bin/env bash
# The GPU end-to-end check (issue 27) on the device machine, in one call:
#
#   bash benchmarks/device/bundle.sh                     # here, once: .device-bundle (33 MB)
#   run(command="OUT=$OUT bash benchmarks/gpu_e2e.sh", carry=[".device-bundle"], timeout_s=540)
#
# Ray comes from the bundle (the image has none); the steps and what they measure are in
# benchmarks/gpu_e2e.py. The whole script stays under GPU_E2E_BUDGET_S (480 s), so a second
# run fits in a session's 15 minutes of device time. Results: $OUT/gpu-e2e.json, gpu-e2e.md,
# gpu-e2e.log. GPU_E2E_DRY=1 runs every step on the CPU at a tiny size (tests do).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-./gpu-e2e-out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
cd "$ROOT" || exit 2
PY=${PYTHON:-$(command -v python3 || command -v python)}
if ! "$PY" -c "import ray" 2>/dev/null; then  # the device image has no Ray: the bundle's
  # shellcheck disable=SC1091
  source benchmarks/device/unpack.sh || exit 2
fi
timeout --kill-after=20 "${GPU_E2E_BUDGET_S:-480}" "$PY" benchmarks/gpu_e2e.py --out "$OUT" \
  ${GPU_E2E_DRY:+--dry} 2>&1 | tee "$OUT/gpu-e2e.log"
exit "${PIPESTATUS[0]}"
