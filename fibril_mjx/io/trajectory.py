"""Recorded state logs for `--physics trajectory` (`fibril-mjx run MANIFEST --trajectory LOG`;
`--physics trajectory` is implied by `--trajectory` and needs it):
the motion of a robot — from MuJoCo C, a motion-capture system, a real robot's state estimate —
under the device models.

A log is an NPZ file or a Parquet table with `qpos` `(T, nq)` and optionally `qvel` `(T, nv)`,
`qacc` `(T, nv)`, `ctrl` `(T, nu)`, `act` `(T, na)` and `time` `(T,)` seconds (NPZ: arrays by
those names; Parquet: columns `qpos_0 … qpos_{nq-1}`, `qvel_0 …`, `qacc_0 …`, `ctrl_0 …`,
`act_0 …`, `time`).

- Without `time` the frames are the ticks (frame k is tick k); with `time` every coordinate is
  interpolated linearly onto the ticks `k·dt` (quaternion blocks of free and ball joints are
  re-normalized after the interpolation) and ticks outside the log are an error.
- Without `qvel`, velocities are the backward differences of the positions
  (`mj_differentiatePos` between frames k−1 and k, so quaternions are differenced on the
  manifold): MuJoCo's semi-implicit Euler sets `qpos_k = qpos_{k−1} + dt·qvel_k`, so on a log
  MuJoCo made at the model's timestep this recovers its velocities to rounding; elsewhere it is
  first order (lag dt/2). Frame 0 takes the forward difference of frames 0 and 1.
- Without `ctrl`, the controls are what the manifest's actuators write (their command script
  or trace), as in a `c` run.

Positions, orientations and velocities are reproduced as logged. Accelerations (accelerometer,
force sensors, `actuatorfrc`) are the log's own with `qacc` (`mj_inverse`), else MuJoCo's
forward dynamics of each logged state (`mj_forward`); never differenced from the log. What that
means for a log MuJoCo did not make: docs/internals/interfaces.md, "Trajectory logs".
"""

from __future__ import annotations

import pathlib

import mujoco
import numpy as np

from fibril_mjx.errors import ConfigError
from fibril_mjx.io.readers import read_npz, read_parquet

_FIELDS = ('qpos', 'qvel', 'qacc', 'ctrl', 'act')


def _read(path: pathlib.Path) -> dict:
  if path.suffix == '.npz':
    z = read_npz(path)
    return {k: np.asarray(z[k], np.float64) for k in z if k in _FIELDS + ('time',)}
  if path.suffix in ('.parquet', '.pq'):
    table = read_parquet(path)
    cols = {c: np.asarray(table.column(c).to_numpy(), np.float64) for c in table.column_names}
    out = {}
    for f in _FIELDS:
      k = sorted((c for c in cols if c.startswith(f'{f}_') and c[len(f) + 1:].isdigit()),
                 key=lambda c: int(c[len(f) + 1:]))
      if k:
        out[f] = np.stack([cols[c] for c in k], axis=1)
    if 'time' in cols:
      out['time'] = cols['time']
    return out
  raise ConfigError(str(path), 'trajectory', 'unknown log format (.npz or .parquet)',
                    path.suffix)


def _quat_blocks(m: mujoco.MjModel) -> list[slice]:
  out = []
  for j in range(m.njnt):
    a = int(m.jnt_qposadr[j])
    if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE:
      out.append(slice(a + 3, a + 7))
    elif m.jnt_type[j] == mujoco.mjtJoint.mjJNT_BALL:
      out.append(slice(a, a + 4))
  return out


def load(path, m: mujoco.MjModel, n_ticks: int | None = None) -> dict:
  """The log at `path` on the model's ticks: `{'qpos', 'qvel'[, 'qacc'][, 'ctrl'][, 'act']}`
  float64.

  Raises:
    ConfigError: naming the file, the field and the rule (missing `qpos`, a width that is not
      the model's, non-finite values, ticks outside a timed log).
  """
  path = pathlib.Path(path)
  if not path.exists():
    raise ConfigError(str(path), 'trajectory', 'no such file', str(path))
  log = _read(path)
  want = {'qpos': m.nq, 'qvel': m.nv, 'qacc': m.nv, 'ctrl': m.nu, 'act': m.na}
  if 'qpos' not in log:
    raise ConfigError(str(path), 'qpos', 'a state log needs qpos (T, nq)', sorted(log))
  t = log['qpos'].shape[0]
  for f, v in log.items():
    if f == 'time':
      continue
    if v.ndim != 2 or v.shape != (t, want[f]):
      raise ConfigError(str(path), f, f'expected shape ({t}, {want[f]}) for this model',
                        list(v.shape))
    if not np.all(np.isfinite(v)):
      raise ConfigError(str(path), f, 'values must be finite', 'nan/inf')
  if 'time' in log:
    times, dt = log.pop('time'), float(m.opt.timestep)
    last = int(np.floor((times[-1] - times[0]) / dt + 1e-9))
    n = last + 1 if n_ticks is None else n_ticks + 1
    ticks = times[0] + np.arange(n) * dt
    if ticks[-1] > times[-1] + 1e-9 * dt:
      raise ConfigError(str(path), 'time', f'the log ends at {times[-1]:g} s, before tick '
                        f'{n - 1} ({ticks[-1]:g} s)', float(times[-1]))
    log = {f: np.stack([np.interp(ticks, times, v[:, i]) for i in range(v.shape[1])], axis=1)
           if v.shape[1] else np.zeros((n, 0)) for f, v in log.items()}
    for q in _quat_blocks(m):
      log['qpos'][:, q] /= np.linalg.norm(log['qpos'][:, q], axis=1, keepdims=True)
  if 'qvel' not in log:
    qp = log['qpos']
    qv = np.zeros((qp.shape[0], m.nv))
    for k in range(1, qp.shape[0]):
      mujoco.mj_differentiatePos(m, qv[k], float(m.opt.timestep), qp[k - 1], qp[k])
    if qp.shape[0] > 1:
      mujoco.mj_differentiatePos(m, qv[0], float(m.opt.timestep), qp[0], qp[1])
    log['qvel'] = qv
  return log
