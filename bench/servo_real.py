"""fibril_mjx tune on REAL servo logs: a Dynamixel XL330 on a pendulum bench (the public logs of
an actuator-identification project, excerpted in tests/data/servo_xl330/, README there).

    .venv/bin/python bench/servo_real.py [--tune FILE] [--no-published]
    .venv/bin/python bench/servo_real.py --quick   # smoke test: one log each way, 1 iteration

Trains `manifests/tuning/servo_xl330_tune.yaml` (firmware P gains 100, 400, 800; four
trajectories each) with `fibril_sim/position_servo`, then prints the held-out error on gain 200:
the mean absolute error of the simulated angle over each held-out log (a closed-loop rollout
of 6 s from the log's first state, the firmware law reading the simulated angle), averaged
over the logs, in degrees — the error measure of the identification project (its `mae.py`) —
and the wall time of the whole tune (load, compile, fit, held-out evaluation).

For comparison (unless `--no-published`) it also rolls the project's PUBLISHED parameter sets
M1..M6 for this servo (tests/data/servo_xl330/published_params.json) out on the same held-out
logs with a float64 NumPy transcription of that project's own simulator (written below from
its description in the README: P law → PWM → DC motor with back-EMF, friction budget, stopping
torque, its integrator), so both numbers come from the same logs and the same measure.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import tempfile
import time

import numpy as np
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DATA = ROOT / 'tests' / 'data' / 'servo_xl330'
TUNE = ROOT / 'manifests' / 'tuning' / 'servo_xl330_tune.yaml'
ERROR_GAIN = (4096 / (2 * np.pi)) / (256 * 885)
G = 9.80665


def published_rollout(p: dict, rec) -> np.ndarray:
  """The project's simulator (float64) for parameter set `p` on one recording: positions."""
  meta = rec.meta
  m, L, vin, dt = meta['mass'], meta['length'], meta['vin'], meta['dt']
  c = rec.commands['servo']
  kp = float(c['kp'][0])
  inertia = m * L * L + p['armature']
  q, dq = float(rec.initial['qpos'][0]), float(rec.initial['qvel'][0])
  get = lambda k: p.get(k, 0.0)   # noqa: E731
  out = np.empty(len(c['position']))
  for i, (goal, on) in enumerate(zip(c['position'], c['enable'])):
    out[i] = q
    duty = np.clip((goal - q) * kp * ERROR_GAIN, -1, 1)
    tm = (p['kt'] * vin * duty / p['R'] - p['kt'] ** 2 * dq / p['R']) * float(on)
    te = -m * G * L * np.sin(q + p['q_offset'])
    s = np.exp(-abs(dq / p['dtheta_stribeck']) ** p['alpha']) if 'alpha' in p else 0.0
    budget = get('friction_base') + s * get('friction_stribeck')
    if 'load_friction_motor' in p:        # directional (M5, M6)
      budget += abs(te * p['load_friction_external'] - tm * p['load_friction_motor'])
      budget += s * abs(te * p['load_friction_external_stribeck']
                        - tm * p['load_friction_motor_stribeck'])
      if np.sign(te) != np.sign(tm):      # quadratic (M6)
        budget += s * ((abs(te) < abs(tm)) * get('load_friction_external_quad') * te ** 2
                       + (abs(te) > abs(tm)) * get('load_friction_motor_quad') * tm ** 2)
    else:
      budget += abs(te - tm) * (get('load_friction_base') + s * get('load_friction_stribeck'))
    net = tm + te
    stop = inertia / dt * dq + net
    net -= np.sign(stop) * min(abs(stop), budget + p['friction_viscous'] * abs(dq))
    a = net / inertia
    dq = float(np.clip(dq + a * dt, -100, 100))
    q += dq * dt + 0.5 * a * dt * dt
  return out


def heldout_mae_deg(result) -> list[float]:
  """Per held-out recording: MAE (degrees) of the fitted model's angle at the recorded
  samples."""
  out = []
  for pred, y, wt, ts in result.traces['servo.position']:
    out.append(float(np.degrees(np.mean(np.abs(pred[1, :, 0] - y[:, 0])))))
  return out


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument('--tune', default=str(TUNE))
  ap.add_argument('--no-published', action='store_true')
  ap.add_argument('--quick', action='store_true',
                  help='smoke test: the tune file cut to its first training and held-out log '
                       'and one iteration')
  a = ap.parse_args(argv)

  from fibril_mjx.io.recording import read_recording
  from fibril_mjx.workflows.tune import read_tune_file, tune
  tmp = tempfile.TemporaryDirectory(prefix='fibril_servo_real_')   # the --quick tune file
  spec = read_tune_file(quick_tune_file(a.tune, pathlib.Path(tmp.name)) if a.quick else a.tune)
  t0 = time.perf_counter()
  res = tune(spec, progress=False)
  wall = time.perf_counter() - t0
  maes = heldout_mae_deg(res)
  print(f'fibril_mjx tune {pathlib.Path(a.tune).name}: {res.iterations} iterations, '
        f'wall {wall:.1f} s (tune-reported {res.wall_s:.1f} s)')
  for name, x, s in zip(res.names, res.estimate, res.sigma):
    print(f'  {name:36s} {x:12.6g} ± {2 * s:.3g}')
  print(f'held-out MAE (deg) per log: {", ".join(f"{m:.2f}" for m in maes)}')
  print(f'held-out MAE (deg): {np.mean(maes):.3f}')
  if not a.no_published:
    params = json.loads((DATA / 'published_params.json').read_text())
    recs = [read_recording(pathlib.Path(spec.path).parent / h) if isinstance(h, str) else None
            for h in spec.heldout]
    for name, p in params.items():
      errs = [np.degrees(np.mean(np.abs(published_rollout(p, r)
                                        - r.sensors['servo']['position']))) for r in recs]
      print(f'published {name}: held-out MAE {np.mean(errs):.3f} deg')
  print(f'servo_heldout_mae_deg={np.mean(maes):.4f}')
  print(f'servo_tune_wall_s={wall:.2f}')
  return 0


def quick_tune_file(path, tmp: pathlib.Path) -> pathlib.Path:
  """A copy of tune file `path` in `tmp` with its first training and held-out recordings and
  one iteration (paths made absolute)."""
  path = pathlib.Path(path).resolve()
  doc = yaml.safe_load(path.read_text())
  doc['manifest'] = str(path.parent / doc['manifest'])
  for key in ('train', 'heldout'):
    doc[key] = [str(path.parent / r) for r in doc[key][:1]]
  doc['optimizer'] = {**doc['optimizer'], 'iterations': 1}
  out = tmp / path.name
  out.write_text(yaml.safe_dump(doc, sort_keys=False))
  return out


if __name__ == '__main__':
  sys.exit(main())
