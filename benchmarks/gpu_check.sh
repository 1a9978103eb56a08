#!/usr/bin/env bash
# GPU check: Feedline's torch-only parts on one CUDA machine that has torch but no Ray.
#
#   OUT=/path/to/results bash benchmarks/gpu_check.sh     # OUT defaults to ./gpu-check-out
#
# Steps, each under its own `timeout` and all inside one budget (GPU_CHECK_BUDGET_S, default
# 450 s, so the whole script ends in under 8 minutes even when every step hangs):
#   env           python, torch, CUDA, nvidia-smi; wheels carried in .whl/ are installed
#   imports       pipeline.transfer / .collective / .profile and every submodule import with Ray
#                 blocked (the Ray wheel does not fit on the GPU machine)
#   gpu_tests     python -m pytest tests/gpu (junit xml), Ray blocked
#   h2d           benchmarks/h2d.py --parts bandwidth: pageable, Ray-style pinning in a thread
#                 pool, reused pinned buffers on the compute stream, Feedline's pool on a side
#                 stream (GB/s and ms per batch, medians of rotated trials)
#   overlap       benchmarks/h2d.py --parts overlap: copies against a matmul loop on the default
#                 stream (compute alone, copy alone, together, overlap fraction)
#   profile       benchmarks/profile_overhead.py --parts single: StepProfiler off vs CUDA events
#                 vs CUDA events + NVTX, on a small and a larger model
#   ddp_cuda      profile_overhead.py --parts ddp on NCCL (one rank per GPU): DDP's C++
#                 all-reduce vs timed_hook + spans
#   ddp_cpu       the same on 2 gloo ranks on the CPU (a quiet machine's numbers for the note)
#
# Without CUDA the GPU-only parts say SKIPPED and the CPU fallbacks run at --quick size, so the
# script itself can be checked anywhere. Files under $OUT (at most 4, for the device tool):
#   summary.md      every number, the step table and the environment
#   results.json    each step's JSON, by step name
#   gpu_tests.xml   pytest's junit report
#   gpu_check.log   everything printed
# Exit status: 0 when no step failed or timed out, 1 otherwise.

set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-./gpu-check-out}   # relative to where the script is started
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
cd "$ROOT" || exit 2
BUDGET_S=${GPU_CHECK_BUDGET_S:-450}
START_S=$(date +%s)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/feedline-gpu-check.XXXXXX") || exit 2
trap 'rm -rf "$WORK"' EXIT
LOG=$OUT/gpu_check.log
SUMMARY=$OUT/summary.md
STEPS=$WORK/steps.tsv   # name, status, seconds, note
: >"$STEPS"

PY=${PYTHON:-$(command -v python3 || command -v python)}

# Ray is blocked for every process this script starts, spawned DDP ranks included: a stub
# package named `ray` that raises ImportError, first on PYTHONPATH. On the GPU machine Ray is
# not installed at all; here it makes a machine with Ray behave like one without.
mkdir -p "$WORK/noray/ray"
cat >"$WORK/noray/ray/__init__.py" <<'EOF'
raise ImportError("ray is blocked by benchmarks/gpu_check.sh: this code path must work without Ray")
EOF
export PYTHONPATH="$WORK/noray:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1

elapsed() { echo $(($(date +%s) - START_S)); }

record() {  # name status seconds note
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$STEPS"
}

skip() {  # name reason
  echo
  echo "=== $1: SKIPPED: $2"
  record "$1" "SKIPPED" 0 "$2"
  write_summary
}

# run_step NAME LIMIT_S NOTE -- COMMAND...: run under timeout (clipped to the budget left).
run_step() {
  local name=$1 limit=$2 note=$3
  shift 4
  local left=$((BUDGET_S - $(elapsed)))
  if ((left < 15)); then
    skip "$name" "only ${left}s of the ${BUDGET_S}s budget left"
    return
  fi
  ((limit > left)) && limit=$left
  echo
  echo "=== $name (timeout ${limit}s, ${left}s of budget left) ==="
  echo "+ $*"
  local t0 t1 rc status
  t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$WORK/$name.out"
  rc=${PIPESTATUS[0]}
  t1=$(date +%s)
  case $rc in
    0) status=ok ;;
    124 | 137) status="TIMEOUT after ${limit}s" ;;
    *) status="FAILED (exit $rc)" ;;
  esac
  echo "=== $name: $status in $((t1 - t0))s"
  record "$name" "$status" $((t1 - t0)) "$note"
  merge_json
  write_summary
}

merge_json() {
  "$PY" - "$WORK" "$OUT/results.json" <<'EOF' || echo "(could not merge JSON results)"
import json, sys
from pathlib import Path
work, out = Path(sys.argv[1]), Path(sys.argv[2])
merged = {}
for path in sorted(work.glob("*.json")):
    try:
        merged[path.stem] = json.loads(path.read_text())
    except ValueError as exc:
        merged[path.stem] = {"error": f"unreadable: {exc}"}
out.write_text(json.dumps(merged, indent=2))
EOF
}

write_summary() {
  {
    echo "# Feedline GPU check"
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(elapsed)s of a ${BUDGET_S}s budget; commit" \
      "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)," \
      "$(git status --porcelain 2>/dev/null | wc -l | tr -d ' ') files changed since"
    echo
    if [[ ${CUDA:-} == 0 ]]; then
      echo "**No CUDA device here: the GPU-only parts were SKIPPED. The numbers below are CPU"
      echo "fallback smoke tests at --quick size, not GPU results.**"
      echo
    fi
    if [[ -s $WORK/env.md ]]; then cat "$WORK/env.md"; echo; fi
    echo "| step | status | seconds | note |"
    echo "|---|---|---:|---|"
    while IFS=$'\t' read -r name status secs note; do
      echo "| $name | $status | $secs | $note |"
    done <"$STEPS"
    for name in imports gpu_tests h2d overlap profile ddp_cuda ddp_cpu; do
      if [[ -s $WORK/$name.md ]]; then
        echo
        echo "## $name"
        echo
        cat "$WORK/$name.md"
      fi
    done
  } >"$SUMMARY"
}

env_report() {
  echo "## environment"
  echo
  echo '```'
  echo "\$ $PY -V"; "$PY" -V 2>&1
  if command -v python >/dev/null && [[ $(command -v python) != "$PY" ]]; then
    echo "\$ python -V"; python -V 2>&1
  fi
  echo "\$ $PY -c 'import torch; print(torch.__version__, torch.cuda.is_available())'"
  timeout 120 "$PY" -c 'import torch; print(torch.__version__, torch.cuda.is_available())' 2>&1
  echo "\$ nvidia-smi"
  if command -v nvidia-smi >/dev/null; then
    timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,temperature.gpu,utilization.gpu,pcie.link.gen.current,pcie.link.width.current --format=csv 2>&1
    timeout 30 nvidia-smi 2>&1
  else
    echo "nvidia-smi: not found"
  fi
  echo "\$ nproc; uname -m"; nproc; uname -m
  echo "\$ $PY -m pip list (the packages this check uses)"
  timeout 60 "$PY" -m pip list 2>/dev/null |
    grep -iE '^(torch|numpy|pyyaml|pytest|pytest-timeout|nvidia-ml-py|ray) ' || true
  echo '```'
}

install_missing() {
  # Nothing can be downloaded on the GPU machine. The repo is imported from the working tree
  # (PYTHONPATH above; no `pip install -e .`, which would try to resolve Ray). A wheel that a
  # caller carried in .whl/ (see the device README) is installed into a private target.
  if compgen -G "$ROOT/.whl/*.whl" >/dev/null; then
    echo "installing carried wheels: $(ls "$ROOT"/.whl/*.whl | xargs -n1 basename | tr '\n' ' ')"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$WORK/site" "$ROOT"/.whl/*.whl && export PYTHONPATH="$PYTHONPATH:$WORK/site"
  fi
  local missing
  missing=$("$PY" - <<'EOF'
import importlib.util
print(" ".join(m for m in ("torch", "numpy", "yaml", "pytest") if importlib.util.find_spec(m) is None))
EOF
)
  echo "missing python modules: ${missing:-none}"
  MISSING=$missing
}

write_helpers() {
  cat >"$WORK/import_check.py" <<'EOF'
"""Import pipeline.transfer/.collective/.profile and every submodule with Ray blocked."""
import importlib
import pkgutil
import sys

sys.modules["ray"] = None  # `import ray` now raises ImportError, as on a machine without Ray
failed = []
for pkg in ("pipeline.transfer", "pipeline.collective", "pipeline.profile"):
    names = [pkg]
    try:
        module = importlib.import_module(pkg)
        names += [i.name for i in pkgutil.walk_packages(module.__path__, pkg + ".")]
    except Exception as exc:  # noqa: BLE001 - reported below
        failed.append((pkg, exc))
    for name in names[1:]:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001
            failed.append((name, exc))
    print(f"{pkg}: {len(names)} modules imported")
third = sorted({k.split(".")[0] for k, v in sys.modules.items() if v is not None}
               - set(sys.stdlib_module_names) - {"pipeline"})
print("third-party modules loaded:", ", ".join(m for m in third if not m.startswith("_")))
for name, exc in failed:
    print(f"FAILED: import {name}: {exc!r}")
print("Ray-free import check:", "FAILED" if failed else "passed")
sys.exit(1 if failed else 0)
EOF
  # pytest with Ray blocked twice: the stub on PYTHONPATH, and sys.modules in this process.
  cat >"$WORK/run_pytest.py" <<'EOF'
import sys

sys.modules["ray"] = None
import pytest  # noqa: E402

sys.exit(pytest.main(sys.argv[1:]))
EOF
}

main() {
  echo "Feedline GPU check: OUT=$OUT, budget ${BUDGET_S}s, python $PY"
  write_helpers
  env_report | tee "$WORK/env.md"
  install_missing
  if [[ " $MISSING " == *" torch "* ]]; then
    echo "torch is missing: nothing to check"
    record env "FAILED" "$(elapsed)" "torch is not importable"
    write_summary
    return 1
  fi
  CUDA=$(timeout 120 "$PY" -c 'import torch; print(int(torch.cuda.is_available()))' 2>/dev/null)
  [[ $CUDA == 1 ]] || CUDA=0
  QUICK=${GPU_CHECK_QUICK:-}
  if [[ $CUDA != 1 ]]; then
    QUICK=1
    echo "SKIPPED (GPU only): no CUDA device, so the CUDA tests, CUDA H2D/overlap, CUDA-event"
    echo "and NVTX profiling and NCCL DDP are skipped; the CPU fallbacks run at --quick size."
  fi
  local q=() dev=cpu
  [[ -n $QUICK ]] && q=(--quick)
  [[ $CUDA == 1 ]] && dev=cuda
  record env ok "$(elapsed)" "cuda=${CUDA:-?} quick=${QUICK:-0} missing=${MISSING:-none}"
  write_summary

  run_step imports 90 "Ray blocked" -- "$PY" "$WORK/import_check.py"
  { echo '```'; cat "$WORK/imports.out"; echo '```'; } >"$WORK/imports.md"

  if [[ " $MISSING " == *" pytest "* ]]; then
    skip gpu_tests "pytest is not installed (carry its wheel in .whl/)"
  else
    local test_note="tests/gpu on CUDA"
    [[ $CUDA != 1 ]] && test_note="no CUDA: the tests skip themselves; only their Ray-free collection is checked"
    run_step gpu_tests 150 "$test_note" -- \
      "$PY" "$WORK/run_pytest.py" -q -p no:cacheprovider --rootdir "$ROOT" -o timeout=90 \
      --junitxml "$OUT/gpu_tests.xml" tests/gpu
    { echo '```'; tail -n 15 "$WORK/gpu_tests.out"; echo '```'; } >"$WORK/gpu_tests.md"
  fi

  local h2d_note="fair baselines, medians of 5 rotated trials"
  [[ $CUDA != 1 ]] && h2d_note="SKIPPED on GPU (no CUDA): CPU fallback at --quick size, a smoke test only"
  run_step h2d 120 "$h2d_note" -- \
    "$PY" benchmarks/h2d.py --device "$dev" --parts bandwidth "${q[@]}" \
    --json "$WORK/h2d.json" --md "$WORK/h2d.md"
  run_step overlap 90 "$h2d_note" -- \
    "$PY" benchmarks/h2d.py --device "$dev" --parts overlap "${q[@]}" \
    --json "$WORK/overlap.json" --md "$WORK/overlap.md"

  local prof_note="CUDA events, CUDA events + NVTX"
  [[ $CUDA != 1 ]] && prof_note="SKIPPED on GPU (no CUDA): host clock on CPU at --quick size"
  local shapes=512x64,4096x512
  [[ -n $QUICK ]] && shapes=512x64
  run_step profile 90 "$prof_note" -- \
    "$PY" benchmarks/profile_overhead.py --parts single --device "$dev" --shapes "$shapes" \
    "${q[@]}" --json "$WORK/profile.json" --md "$WORK/profile.md"

  if [[ $CUDA == 1 ]]; then
    run_step ddp_cuda 90 "NCCL, one rank per GPU" -- \
      "$PY" benchmarks/profile_overhead.py --parts ddp --device cuda "${q[@]}" \
      --json "$WORK/ddp_cuda.json" --md "$WORK/ddp_cuda.md"
  else
    skip ddp_cuda "needs CUDA (NCCL)"
  fi
  run_step ddp_cpu 90 "2 gloo ranks, 1 thread each" -- \
    "$PY" benchmarks/profile_overhead.py --parts ddp --device cpu --world 2 "${q[@]}" \
    --json "$WORK/ddp_cpu.json" --md "$WORK/ddp_cpu.md"

  write_summary
  echo
  echo "=== done in $(elapsed)s; files in $OUT:"
  ls -l "$OUT"
  echo
  cat "$SUMMARY"
  if awk -F'\t' '$2 ~ /^(FAILED|TIMEOUT)/ {bad = 1} END {exit !bad}' "$STEPS"; then
    echo "gpu check: some steps FAILED or TIMED OUT (see the table above)"
    return 1
  fi
}

main 2>&1 | tee "$LOG"
exit "${PIPESTATUS[0]}"
