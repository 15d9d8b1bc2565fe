"""Writes the recordings of `latency_arm_tune.yaml`: the hinge of `latency_arm.xml` stepped by
MuJoCo C (`mujoco.mj_step`), its torque command delayed by a continuous latency in NumPy (the
tick's ctrl is the time average of the held command over the tick), the encoder read every
tick with NumPy noise.

    python manifests/tuning/make_latency_recordings.py [--latency-ticks 1.4] [--out DIR]

Commands are random torque levels held for 4 ticks (seeded). The true latency is in each
recording's `meta`; the tune file starts at 0.5 tick.
"""

from __future__ import annotations

import argparse
import pathlib

import mujoco
import numpy as np

from fibril_mjx.io import recording

HERE = pathlib.Path(__file__).resolve().parent
DT, TICKS, HOLD, TORQUE, NOISE_RAD = 0.002, 250, 4, 0.1, 1e-4
RECORDINGS = (('latency_arm_train_0', 1), ('latency_arm_heldout_0', 2))


def delayed_ctrl(u: np.ndarray, latency_ticks: float) -> np.ndarray:
  """Per tick j the mean over [j, j+1) of the command held at the actuator: `u[m]` from its
  arrival `m + latency` on, 0 before the first arrival (ticks as time units)."""
  arrive = np.arange(len(u)) + latency_ticks
  ctrl = np.zeros(len(u))
  for j in range(len(u)):
    edges = np.concatenate([[j], arrive[(arrive > j) & (arrive < j + 1)], [j + 1]])
    for a, b in zip(edges[:-1], edges[1:]):
      got = np.flatnonzero(arrive <= a)
      ctrl[j] += (b - a) * (u[got[-1]] if len(got) else 0.0)
  return ctrl


def make(seed: int, latency_ticks: float) -> recording.Recording:
  rng = np.random.default_rng(seed)
  u = np.repeat(rng.uniform(-TORQUE, TORQUE, TICKS // HOLD + 1), HOLD)[:TICKS + 1]
  ctrl = delayed_ctrl(u, latency_ticks)
  m = mujoco.MjModel.from_xml_path(str(HERE / 'latency_arm.xml'))
  d = mujoco.MjData(m)
  q = np.zeros(TICKS + 1)
  for k in range(TICKS + 1):
    q[k] = d.qpos[0]
    d.ctrl[0] = ctrl[k]
    mujoco.mj_step(m, d)
  t = np.arange(TICKS + 1) * DT
  enc = q + NOISE_RAD * rng.standard_normal(q.shape)
  return recording.Recording(
      {'encoder': {'position': enc.astype(np.float32), 'sample_time_s': t,
                   'arrival_time_s': t}},
      commands={'motor': {'value': u.astype(np.float32), 'issued': np.ones(len(u), bool),
                          'time_s': t}},
      initial={'qpos': np.zeros(1), 'qvel': np.zeros(1)},
      meta={'source': 'MuJoCo C mj_step, command delayed in NumPy '
                      '(make_latency_recordings.py)', 'latency_ticks': latency_ticks})


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  ap.add_argument('--latency-ticks', type=float, default=1.4)
  ap.add_argument('--out', default=str(HERE / 'recordings'))
  a = ap.parse_args(argv)
  for name, seed in RECORDINGS:
    p = recording.write_recording(pathlib.Path(a.out) / f'{name}.npz',
                                  make(seed, a.latency_ticks))
    print(f'wrote {p} ({p.stat().st_size // 1024} kB)')


if __name__ == '__main__':
  main()
