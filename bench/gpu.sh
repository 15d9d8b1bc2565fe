#!/usr/bin/env bash
# The prepared GPU check (issue 9): world-steps/s, compile time and memory per world for the
# AHRS turntable, the IMU + EKF example and the wheeled base at 4096 / 16384 / 65536 worlds,
# MJX-JAX and (where it installs) MJX-Warp, plus the C ratio. Under 8 minutes on one GPU
# (bench/gpu_bench.py stops starting new sizes after --budget-s, default 420 s).
#
#   bash bench/gpu.sh            # on a GPU machine (installs jax[cuda] / mujoco-mjx[warp] if missing)
#   bash bench/gpu.sh --quick    # anywhere, on the CPU: 64 worlds x 5 ticks (smoke test)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
QUICK=0
for a in "$@"; do [ "$a" = "--quick" ] && QUICK=1; done
echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ)  host $(hostname)  cores $(nproc)"
if [ "$QUICK" = 0 ] && command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  # A GPU jax and MJX-Warp, pinned to the project's jax / mujoco versions; "where it installs".
  "$PY" -c "import jax; assert jax.default_backend() == 'gpu'" 2>/dev/null ||
    "$PY" -m pip install -q "jax[cuda12]==$("$PY" -c 'import jax; print(jax.__version__)')" ||
    echo "note: jax[cuda12] did not install; running on $("$PY" -c 'import jax; print(jax.default_backend())')"
  "$PY" -c "import warp" 2>/dev/null ||
    "$PY" -m pip install -q "mujoco-mjx[warp]==$("$PY" -c 'import mujoco; print(mujoco.__version__)')" ||
    echo "note: mujoco-mjx[warp] did not install; MJX-Warp skipped"
fi
FIBRIL_MJX_NO_PROGRESS=1 timeout 470 "$PY" bench/gpu_bench.py "$@"
