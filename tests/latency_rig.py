"""The continuous-latency tests' rig: one hinge driven by a torque motor (the MJCF of the
example, `manifests/tuning/latency_arm.xml`, with its damping settable) and the float64 NumPy
reference of a command delayed by a fractional number of ticks."""

from __future__ import annotations

import pathlib

import mujoco
import numpy as np

from fibril_mjx.io import recording

ARM_XML = (pathlib.Path(__file__).resolve().parents[1] / 'manifests' / 'tuning' /
           'latency_arm.xml').read_text()


def arm_xml(damping: float = 0.02) -> str:
  """The arm's MJCF with hinge damping `damping` (N·m·s/rad)."""
  assert 'damping="0.02"' in ARM_XML
  return ARM_XML.replace('damping="0.02"', f'damping="{damping!r}"')


def delayed(u, latency_ticks: float) -> np.ndarray:
  """Per tick j the mean over [j, j+1) of the held command (`u[m]` from `m + L` on, 0
  before): with `n = floor(L)`, `f = L - n`, tick j gets `f·u[j-n-1] + (1-f)·u[j-n]`."""
  n, f = int(np.floor(latency_ticks)), latency_ticks - np.floor(latency_ticks)
  pad = np.concatenate([np.zeros(n + 1), np.asarray(u, np.float64)])
  j = np.arange(len(u))
  return f * pad[j] + (1 - f) * pad[j + 1]


def c_angles(xml: str, ctrl) -> np.ndarray:
  """MuJoCo C (`mj_step`) from rest with `ctrl[k]` on actuator 0 over tick k: the hinge angle
  at the start of each tick `(len(ctrl),)`."""
  m = mujoco.MjModel.from_xml_string(xml)
  d = mujoco.MjData(m)
  q = np.zeros(len(ctrl))
  for k, c in enumerate(ctrl):
    q[k] = d.qpos[0]
    d.ctrl[0] = c
    mujoco.mj_step(m, d)
  return q


def held_steps(rng, amplitude: float, ticks: int, hold: int) -> np.ndarray:
  """`(ticks + 1,)` float32 command levels uniform in ±`amplitude`, each held `hold` ticks
  (float32: what a recording stores and the model reads)."""
  u = np.repeat(rng.uniform(-amplitude, amplitude, ticks // hold + 1), hold)[:ticks + 1]
  return u.astype(np.float32)


def delayed_steps_recording(xml: str, seed: int, commands, *, amplitude: float,
                            latency_ticks: float, ticks: int, hold: int, dt: float, noise: float,
                            meta: dict):
  """A recording of the arm in `xml` made by MuJoCo C: `held_steps` commands delayed
  `latency_ticks` in NumPy (`delayed`) drive `c_angles`; the encoder's `position` is the angle
  plus N(0, noise²) from NumPy, stamped at every tick. `commands(u, t)` gives the recording's
  `{component: {field: (n,)}}` commands for the levels `u` at times `t`."""
  rng = np.random.default_rng(seed)
  u = held_steps(rng, amplitude, ticks, hold)
  q = c_angles(xml, delayed(u, latency_ticks))
  t = np.arange(ticks + 1) * dt
  return recording.Recording(
      {'encoder': {'position': (q + noise * rng.standard_normal(q.shape)).astype(np.float32),
                   'sample_time_s': t, 'arrival_time_s': t}},
      commands=commands(u, t), initial={'qpos': np.zeros(1), 'qvel': np.zeros(1)}, meta=meta)
