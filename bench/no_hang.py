#!/usr/bin/env python3
"""No world count hangs: the wheeled base, a humanoid-class contact model (MuJoCo's MJX test
humanoid, nv 27, 21 actuators, contacts) and the turntable at 1024, 4096 and 16384 worlds,
each in ONE program (no host chunking), per-world physics, a few ticks.

The layout (`fibril_mjx.batch.worlds`: devices x LAPACK-safe sub-batches) is printed per run; a
stalled program raises `WorldsStalled` (watchdog) instead of hanging. Last line:
`no_hang_ok=<runs finished>/<runs>`.

  .venv/bin/python bench/no_hang.py            # 3 models x 1024/4096/16384 worlds, 3 ticks
  .venv/bin/python bench/no_hang.py --quick    # wheeled base + turntable at 1024/4096, 2 ticks
  .venv/bin/python bench/no_hang.py --models humanoid --worlds 16384   # one model, one size
"""

import argparse
import pathlib
import sys
import tempfile
import time
from fibril_mjx.batch.simulation import Options

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def humanoid_manifest(tmp: pathlib.Path) -> pathlib.Path:
  import mujoco
  xml = pathlib.Path(mujoco.__file__).parent / 'mjx' / 'test_data' / 'humanoid' / 'humanoid.xml'
  out = tmp / 'humanoid.yaml'
  out.write_text(f'fibril_manifest: 1\nmodel: {xml}\ncomponents: []\n')
  return out


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  ap.add_argument('--worlds', type=int, nargs='+', default=None)
  ap.add_argument('--ticks', type=int, default=None)
  ap.add_argument('--quick', action='store_true')
  ap.add_argument('--models', nargs='+', choices=('wheeled_base', 'turntable', 'humanoid'),
                  default=None, help='run only these models (default: all three)')
  ap.add_argument('--stall-s', type=float, default=120.0)
  a = ap.parse_args(argv)
  from fibril_mjx.batch.worlds import cpu_flags
  cpu_flags()
  import jax
  import fibril_mjx as fm
  from fibril_mjx.batch import worlds
  a.worlds = a.worlds or ([1024, 4096] if a.quick else [1024, 4096, 16384])
  a.ticks = a.ticks or (2 if a.quick else 3)
  tmp = pathlib.Path(tempfile.mkdtemp(prefix='fibril_nohang_'))
  models = {'wheeled_base': REPO / 'manifests' / 'wheeled_base.yaml',
            'turntable': REPO / 'manifests' / 'ahrs_turntable.yaml'}
  if not a.quick:
    models['humanoid'] = humanoid_manifest(tmp)
  if a.models:
    models = {k: v for k, v in models.items() if k in a.models}
    if 'humanoid' in a.models and 'humanoid' not in models:
      models['humanoid'] = humanoid_manifest(tmp)
  print(f'jax {jax.__version__}  devices {len(jax.devices())}  worlds {a.worlds}  ticks {a.ticks}')
  ok = total = 0
  for name, path in models.items():
    sim = fm.load(path)
    cap, why = sim.sub_batch_cap()
    print(f'== {name} ({path.name}): nv {sim.mj_model.nv}; {why}', flush=True)
    for n in a.worlds:
      total += 1
      lay = sim.layout(n)
      t0 = time.perf_counter()
      try:
        quiet = Options(record=False, share_physics=False, stall_s=a.stall_s)
        st, _, _ = sim.rollout(sim.default_params(n), fm.world_keys(0, n), a.ticks,
                               options=quiet)
        finite = int((st.diverged < 0).sum())
        dt = time.perf_counter() - t0
        print(f'  {n:6d} worlds: {lay.describe()}: {dt:6.1f} s incl. compile, '
              f'{finite}/{n} finite', flush=True)
        ok += 1
      except worlds.WorldsStalled as e:
        print(f'  {n:6d} worlds: STALLED: {e}', flush=True)
  print(f'no_hang_ok={ok}/{total}')
  return 0 if ok == total else 1


if __name__ == '__main__':
  sys.exit(main())
