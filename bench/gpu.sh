#!/usr/bin/env bash
# The prepared GPU check (issue 21): bare MJX-JAX, bare MJX-Warp and fibril_mjx's device layer
# on top, for the AHRS turntable and the MJX test humanoid at 4096 / 16384 / 65536 worlds
# (bench/gpu_bench.py; overhead_ratio_<model>_<n>= lines). The device machine is offline and
# its python3 (3.12, jax 0.11 for CUDA) lacks mujoco, mujoco-mjx and pydantic, so:
#
#   bash bench/gpu.sh --fetch   # HERE, where PyPI is reachable: the Python 3.12 manylinux
#                               # x86_64 wheels of what the device lacks -> .gpu_wheels/ (ignored)
#   bash bench/gpu.sh           # ON THE DEVICE, with .gpu_wheels carried: installs them into
#                               # .gpu_site/ (pip --no-index --target) and runs the bench with
#                               # python3, one command under 8 minutes
#   bash bench/gpu.sh --quick   # anywhere, on the CPU: 64 worlds x 5 ticks (smoke test), with
#                               # .venv/bin/python when there is one
#
# Other arguments go to bench/gpu_bench.py (--worlds, --ticks, --models, --budget-s).
# Interpreter: $PY if set; else .venv/bin/python for --quick when present; else python3 with
# .gpu_site/ (installed from .gpu_wheels/ when those are there).
set -uo pipefail
cd "$(dirname "$0")/.."
WHEELS=.gpu_wheels
SITE=.gpu_site
FETCH=0
QUICK=0
ARGS=()
for a in "$@"; do
  case "$a" in
    --fetch) FETCH=1 ;;
    --quick) QUICK=1; ARGS+=("$a") ;;
    *) ARGS+=("$a") ;;
  esac
done

if [ "$FETCH" = 1 ]; then
  # What `import fibril_mjx`, `fm.load` and `mujoco.mjx` import that the device image lacks,
  # at the versions of the project venv (read from it, so they stay what the tests ran with).
  # Not fetched: glfw, PyOpenGL (mujoco imports them only for rendering, inside try/except;
  # the bench runs with MUJOCO_GL=disable), websockets (mujoco's viewer server only).
  # typing-extensions is fetched because pydantic 2.14 needs >= 4.16 and the image's is older
  # or unknown. absl-py, etils, numpy, scipy, pyyaml, chex, optax, tqdm are in the image.
  PY=${PY:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
  DISTS="mujoco mujoco-mjx pydantic pydantic-core annotated-types typing-inspection typing-extensions trimesh"
  PINS=()
  for d in $DISTS; do
    v=$("$PY" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$d") || {
      echo "gpu.sh --fetch: $d is not installed in $PY (make the venv first: make test)"; exit 2; }
    PINS+=("$d==$v")
  done
  rm -rf "$WHEELS" && mkdir -p "$WHEELS"
  echo "fetching for CPython 3.12 manylinux x86_64 with $PY: ${PINS[*]}"
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: --dest "$WHEELS" \
    --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
    "${PINS[@]}" || { echo "gpu.sh --fetch: pip download failed"; exit 1; }
  ls -l "$WHEELS" | tail -n +2 | awk '{printf "  %8.2f MiB  %s\n", $5 / 1048576, $9}'
  total=$(du -cb "$WHEELS"/*.whl | tail -1 | cut -f1)
  awk -v b="$total" 'BEGIN {printf "total %.1f MiB in .gpu_wheels (a device call carries 64 MiB)\n", b / 1048576}'
  echo "MJX-Warp: not fetched: warp-lang 1.18.0 (mujoco-mjx[warp]) is a 149 MB wheel, over the" \
       "64 MiB one device call carries; the device run prints 'impl warp: skipped' and goes on"
  exit 0
fi

echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ)  host $(hostname)  cores $(nproc)"
command -v nvidia-smi >/dev/null 2>&1 &&
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
if [ -z "${PY:-}" ] && [ "$QUICK" = 1 ] && [ -x .venv/bin/python ]; then
  PY=.venv/bin/python
fi
if [ -z "${PY:-}" ]; then
  PY=python3
  if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    rm -rf "$SITE"
    if "$PY" -m pip install --quiet --no-index --no-deps --target "$SITE" "$WHEELS"/*.whl \
         >/tmp/gpu_sh_pip.log 2>&1; then
      echo "installed $(ls "$WHEELS"/*.whl | wc -l) wheels from $WHEELS into $SITE"
    else
      echo "gpu.sh: pip install --target $SITE failed: $(grep -m1 -i error /tmp/gpu_sh_pip.log)"
    fi
  else
    echo "gpu.sh: no $WHEELS/*.whl (run 'bash bench/gpu.sh --fetch' where PyPI is reachable and" \
         "carry .gpu_wheels); running with $PY as it is"
  fi
  export PYTHONPATH="$SITE:.${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"
fi
echo "python $PY ($("$PY" -c 'import sys; print(sys.version.split()[0])'))  PYTHONPATH=$PYTHONPATH"
# No rendering: mujoco then never imports glfw / PyOpenGL (not carried). The stall watchdog
# guards the CPU LAPACK deadlock; a GPU program leaves the host CPU idle while it runs, so it
# is off there (FIBRIL_MJX_STALL_S=0; --quick keeps it).
export MUJOCO_GL=disable FIBRIL_MJX_NO_PROGRESS=1
[ "$QUICK" = 1 ] || export FIBRIL_MJX_STALL_S=0
# 480 s per device command: 420 s for the bench (it starts no new size past --budget-s,
# default 300 s), the rest for the install above. --quick compiles on a small, busy CPU.
LIMIT=420
[ "$QUICK" = 1 ] && LIMIT=1400
timeout -k 10 "$LIMIT" "$PY" -u bench/gpu_bench.py "${ARGS[@]}"
rc=$?
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
  echo "gpu.sh: bench/gpu_bench.py stopped by its $LIMIT s timeout; every figure above is complete"
fi
exit "$rc"
