"""Tutorial: tune physics and device parameters to recordings (docs/tutorials/tune.md).

Fits the turntable's three joint dampings (MJCF physics) and the AHRS gyro bias and
accelerometer scale (device Params) to the recordings in `manifests/tuning/recordings/`
(made by `manifests/tuning/make_recordings.py` from known values, so you can check the fit),
with a tune file written here, and prints each estimate ± 2σ next to the value that made the
recordings. Writes `overlay.yaml` (include it in a manifest with
`parameter_overlays: [{file: ...}]`), `report.txt` and the held-out traces figure.

    .venv/bin/python examples/tutorial_tune.py --out out/tutorials/tune
    .venv/bin/python examples/tutorial_tune.py --small      # the test suite's size
"""

from __future__ import annotations

import argparse
import pathlib
import shutil

import numpy as np
import yaml

from fibril_mjx.io import recording
from fibril_mjx.workflows import tune

TUNING = pathlib.Path(__file__).resolve().parents[1] / 'manifests' / 'tuning'


def tune_file(starts: int, iterations: int) -> dict:
  """The tune file (paths absolute here; in your own file they are relative to it)."""
  rec = TUNING / 'recordings'
  return {
      'fibril_tune': 1,
      'manifest': str(TUNING / 'turntable_ahrs.yaml'),
      'train': [str(rec / 'train_0.npz'), str(rec / 'train_1.npz')],
      'heldout': [str(rec / 'heldout_0.npz')],
      'parameters': [
          {'mjcf': 'joint:yaw.damping', 'bounds': [0.05, 5.0], 'log': True, 'init': 0.455},
          {'mjcf': 'joint:tilt.damping', 'bounds': [0.05, 5.0], 'log': True, 'init': 0.42},
          {'mjcf': 'joint:roll.damping', 'bounds': [0.05, 5.0], 'log': True, 'init': 0.585},
          {'component': 'ahrs', 'field': 'angular_velocity_bias', 'bounds': [-0.1, 0.1],
           'init': 0.0},
          {'component': 'ahrs', 'field': 'linear_acceleration_scale', 'bounds': [0.5, 1.5],
           'init': 1.0}],
      # residual = weight × (model − recorded); weights ≈ 1 / the channel's noise stddev
      'loss': [{'component': 'ahrs', 'field': 'angular_velocity', 'weight': 588.0},
               {'component': 'ahrs', 'field': 'linear_acceleration', 'weight': 50.0}],
      'optimizer': {'method': 'gauss_newton', 'iterations': iterations, 'starts': starts,
                    'start_spread': 0.3, 'seed': 0},
      'overlay_id': 'turntable_unit_7',
  }


def main(argv=None) -> dict:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument('--out', default='out/tutorials/tune')
  ap.add_argument('--small', action='store_true', help='tiny sizes (the test suite runs this)')
  args = ap.parse_args(argv)
  starts, iterations = (1, 8) if args.small else (3, 20)
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  path = out / 'tune.yaml'
  path.write_text(yaml.safe_dump(tune_file(starts, iterations), sort_keys=False))

  # The same as `fibril-mjx tune tune.yaml --out DIR`.
  res = tune.tune(path, progress=False)
  tune.write_outputs(res, out / 'result', overwrite=True)
  truth = recording.read_recording(TUNING / 'recordings' / 'train_0.npz').meta['truth']
  flat_truth = {}
  for k, v in truth.items():
    if isinstance(v, list):
      for i, x in enumerate(v):
        flat_truth[f'{k}[{i}]'] = x
    else:
      flat_truth[k] = v
  inside = {}
  for name, est, sig in zip(res.names, res.estimate, res.sigma):
    true = flat_truth.get(name)
    inside[name] = None if true is None else bool(abs(est - true) <= 2 * sig + 1e-12)
    print(f'{name:40s} {est:10.5f} ± {2 * sig:.5f} (2σ)   true {true}')
  print(f'train loss {res.train_loss:.3f}, held-out loss {res.heldout_loss:.3f}')
  shutil.copy(out / 'result' / 'heldout_traces.png', out / 'figure.png')
  print(f'wrote {out / "result"} and {out / "figure.png"}')
  return {'names': list(res.names), 'estimate': np.asarray(res.estimate).tolist(),
          'within_2sigma': inside, 'train_loss': float(res.train_loss)}


if __name__ == '__main__':
  main()
