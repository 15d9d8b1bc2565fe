"""Writes the example recordings of `tune.yaml`: the turntable simulated with known
("true") parameters and the AHRS noise on, as a real unit would be recorded.

    python manifests/tuning/make_recordings.py [--duration 2.0] [--out DIR]

The true values are in `TRUTH` (and in each recording's `meta`); the tune file starts
about 30 % away from them. Recordings are small `.npz` files (about 50 kB each).
"""

from __future__ import annotations

import argparse
import pathlib

import numpy as np

import fibril_mjx
from fibril_mjx.io import recording
from fibril_mjx.workflows import tune

HERE = pathlib.Path(__file__).resolve().parent
MANIFEST = HERE / 'turntable_ahrs.yaml'
TRUTH = {
    'joint:yaw.damping': 0.35, 'joint:tilt.damping': 0.6, 'joint:roll.damping': 0.45,
    'ahrs.angular_velocity_bias': [0.01, -0.008, 0.005],
    'ahrs.linear_acceleration_scale': [1.02, 0.98, 1.01],
}
# (name, seed, initial yaw offset rad)
RECORDINGS = (('train_0', 1, 0.0), ('train_1', 2, 0.3), ('heldout_0', 3, -0.4))


def truth_overrides(truth=TRUTH) -> dict:
  mjcf, comps = [], []
  for k, v in truth.items():
    if ':' in k:
      el, rest = k.split(':', 1)
      name, attr = rest.rsplit('.', 1)
      mjcf.append({'element': el, 'name': name, 'attribute': attr, 'value': v})
    else:
      cid, field = k.split('.', 1)
      comps.append({'component': cid, 'field': field, 'value': v})
  return {'mjcf': mjcf, 'components': comps}


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  ap.add_argument('--duration', type=float, default=2.0)
  ap.add_argument('--out', default=str(HERE / 'recordings'))
  a = ap.parse_args(argv)
  out = pathlib.Path(a.out)
  sim = fibril_mjx.load(MANIFEST)
  for name, seed, yaw0 in RECORDINGS:
    qpos0 = np.asarray(sim.data0.qpos, np.float64).copy()
    qpos0[0] = yaw0
    rec = tune.simulate_recording(MANIFEST, overrides=truth_overrides(), seed=seed,
                                  duration_s=a.duration, qpos0=qpos0)
    rec.meta['truth'] = TRUTH
    p = recording.write_recording(out / f'{name}.npz', rec)
    print(f'wrote {p} ({p.stat().st_size // 1024} kB)')


if __name__ == '__main__':
  main()
