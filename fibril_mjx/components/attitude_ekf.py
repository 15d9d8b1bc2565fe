"""`fibril_mjx/attitude_ekf` — an attitude EKF in the loop, fed by a `fibril_sim/imu` (SPEC §7).

Wraps the pure estimators of `fibril_mjx.estimators` (quaternion error-state EKF or the RPY
EKF, config `estimator`) as a component so rollouts and campaigns score estimation error
against truth:

- **input**: the delivered output of the IMU component named by `imu` (it must be listed
  earlier in the manifest, so it is sensed first in each tick and its `Delivered` is in `env`);
- **update**: on every tick the IMU delivers (`new_data`), one predict (gyro) + update
  (accelerometer, with gating) step over `dt = (sample_tick − previous sample_tick)·dt_physics`
  — the time between the samples actually processed, so lost samples and several samples
  released in one tick (only the latest is visible) lengthen the step instead of breaking it;
- **initialization** at the first delivered sample (`initial_attitude`): `accelerometer` —
  roll/pitch from that sample's specific force, yaw `initial_rpy_rad[2]`; `truth` — the true
  site attitude at the tick the sample arrives; `fixed` — `initial_rpy_rad`. Then the rotation
  `initial_attitude_offset_rad` (roll/pitch/yaw, composed on the right, i.e. in the IMU frame)
  is applied, e.g. to start from a known error. The first step has `dt = 0` (update only);
- **output** (`fibril_mjx/attitude_estimate/v1`, held between updates like a sensor's
  `Delivered`): the attitude quaternion, the gyro-bias estimate and the 6×6 covariance.
  For `estimator: quaternion` the covariance is over `[δθ (world-frame rotation vector, rad),
  δb (rad/s)]`; for `rpy` over `[roll, pitch, yaw (rad), b (rad/s)]`;
- **truth**: the true attitude of the IMU's site (`truth/<id>/orientation`), so the attitude
  error is computed on the host (`host_metrics`) at each update's sample tick.

The estimator's world frame has z up along −gravity (a still, level IMU reads `+g` on z), so the
MuJoCo model's gravity must point along world −z. Yaw is unobservable from an IMU alone: the
full attitude error contains the integrated gyro drift in yaw; the tilt error (roll/pitch, the
angle between the true and estimated gravity directions) does not.

Noise parameters are per-world, differentiable `Params` (names as in the config).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fibril_mjx import estimators as est
from fibril_mjx import quat, report
from fibril_mjx import transport as tp
from fibril_mjx.build import BuildContext
from fibril_mjx.components import base, imu
from fibril_mjx.components.base import NonNeg, NonNeg3, Positive, Positive3, Vec3
from fibril_mjx.errors import ConfigError, did_you_mean
from fibril_mjx.validation import Strict

TYPE = 'fibril_mjx/attitude_ekf'
SAMPLE_TYPE = 'fibril_mjx/attitude_estimate/v1'


class AttitudeEkfConfigModel(Strict):
  """Validated manifest config of `fibril_mjx/attitude_ekf`.

  Noise model (IEEE-952 / Kalibr units): `gyro_noise_density` rad/s/√Hz,
  `gyro_bias_random_walk` rad/s/√s, `accel_noise_stddev_m_s2` per sample. Gating on
  `e = | ‖a‖ − g |`: above `accel_gate_m_s2` the accelerometer variance is inflated by
  `(e − gate)²`, above `accel_reject_m_s2` the update is skipped (0 = never skip).
  `gravity_m_s2` defaults to the norm of the model's gravity.
  """
  imu: str
  estimator: Literal['quaternion', 'rpy'] = 'quaternion'
  gyro_noise_density: NonNeg3 = (1e-3, 1e-3, 1e-3)
  gyro_bias_random_walk: NonNeg3 = (1e-5, 1e-5, 1e-5)
  accel_noise_stddev_m_s2: Positive3 = (0.05, 0.05, 0.05)
  accel_gate_m_s2: NonNeg = 0.5
  accel_reject_m_s2: NonNeg = 3.0
  gravity_m_s2: Positive | None = None
  initial_attitude: Literal['accelerometer', 'truth', 'fixed'] = 'accelerometer'
  initial_rpy_rad: Vec3 = (0.0, 0.0, 0.0)
  initial_attitude_offset_rad: Vec3 = (0.0, 0.0, 0.0)
  initial_attitude_stddev_rad: NonNeg3 = (0.1, 0.1, 0.1)
  initial_gyro_bias_rad_s: Vec3 = (0.0, 0.0, 0.0)
  initial_gyro_bias_stddev_rad_s: NonNeg3 = (0.01, 0.01, 0.01)


class Params(NamedTuple):
  """Per-world, differentiable parameters (config names; `(3,)` vectors, the rest scalars)."""
  gyro_noise_density: jax.Array
  gyro_bias_random_walk: jax.Array
  accel_noise_stddev_m_s2: jax.Array
  accel_gate_m_s2: jax.Array
  accel_reject_m_s2: jax.Array
  gravity_m_s2: jax.Array
  initial_rpy_rad: jax.Array
  initial_attitude_offset_rad: jax.Array
  initial_attitude_stddev_rad: jax.Array
  initial_gyro_bias_rad_s: jax.Array
  initial_gyro_bias_stddev_rad_s: jax.Array


class Sample(NamedTuple):
  """`fibril_mjx/attitude_estimate/v1`.

  Attributes:
    orientation: `(4,)` estimated IMU attitude body → world `[w, x, y, z]`, `w >= 0`.
    gyro_bias: `(3,)` estimated gyro bias, rad/s.
    covariance: `(6, 6)` error-state covariance (see the module docstring for its frame).
  """
  orientation: jax.Array
  gyro_bias: jax.Array
  covariance: jax.Array


class State(NamedTuple):
  """Per-world state.

  Attributes:
    est: the estimator state (`QuatEkfState` or `RpyEkfState`).
    last_tick: sample tick of the last processed IMU sample (int32, −1 before the first).
    updates: int32 processed IMU samples.
    rejected: int32 accelerometer updates skipped by the hard gate.
    held: the output, `Delivered` of `Sample`.
  """
  est: Any
  last_tick: jax.Array
  updates: jax.Array
  rejected: jax.Array
  held: tp.Delivered


@dataclasses.dataclass(frozen=True)
class AttitudeEkf:
  """A built `fibril_mjx/attitude_ekf` component (static, hashable).

  Attributes:
    imu: the bound `fibril_sim/imu` component (for its site and id).
    gravity: resolved gravity magnitude, m/s².
  """
  id: str
  cfg: AttitudeEkfConfigModel
  imu: imu.Imu
  gravity: float
  dt: float
  fields: tuple

  type = TYPE
  sample_type = SAMPLE_TYPE

  def __hash__(self):
    return hash((self.id, self.cfg, self.imu, self.gravity))

  @property
  def estimator(self) -> est.Estimator:
    return est.quat_ekf() if self.cfg.estimator == 'quaternion' else est.rpy_ekf()

  def default_params(self) -> Params:
    vals = {f: getattr(self.cfg, f) for f in Params._fields}
    vals['gravity_m_s2'] = self.gravity
    return Params(*(jnp.asarray(vals[f], jnp.float32) for f in Params._fields))

  def ekf_params(self, p: Params) -> est.EkfParams:
    reject = p.accel_reject_m_s2
    if self.cfg.accel_reject_m_s2 == 0:
      reject = jnp.full_like(reject, jnp.inf)
    return est.EkfParams(p.gyro_noise_density, p.gyro_bias_random_walk,
                         p.accel_noise_stddev_m_s2, p.accel_gate_m_s2, reject, p.gravity_m_s2)

  @property
  def schedules(self) -> dict:
    return {}

  def _neutral(self) -> Sample:
    return Sample(jnp.array([1.0, 0.0, 0.0, 0.0], jnp.float32), jnp.zeros(3, jnp.float32),
                  jnp.zeros((6, 6), jnp.float32))

  def _start(self, p: Params, accel, q_true):
    """Initial estimator state from the first sample (`accel`) or truth."""
    mode = self.cfg.initial_attitude
    if mode == 'accelerometer':
      ok = jnp.linalg.norm(accel) > 0   # never differentiate atan2 at (0, 0)
      a = jnp.where(ok, accel, jnp.array([0.0, 0.0, 1.0], accel.dtype))
      q0 = quat.from_rpy(est.tilt_from_accel(a, p.initial_rpy_rad[2]))
    elif mode == 'truth':
      q0 = q_true
    else:
      q0 = quat.from_rpy(p.initial_rpy_rad)
    if base.is_set(self.cfg, 'initial_attitude_offset_rad'):
      q0 = quat.multiply(q0, quat.from_rpy(p.initial_attitude_offset_rad))
    ekfp = self.ekf_params(p)
    bias0 = p.initial_gyro_bias_rad_s
    if self.cfg.estimator == 'quaternion':
      return est.quat_ekf_init(ekfp, q0, p.initial_attitude_stddev_rad,
                               p.initial_gyro_bias_stddev_rad_s, bias0)
    return est.rpy_ekf_init(ekfp, quat.to_rpy(q0), p.initial_attitude_stddev_rad,
                            p.initial_gyro_bias_stddev_rad_s, bias0)

  def init(self, params: Params, world_key: jax.Array) -> State:
    del world_key  # deterministic given its input
    held = tp.Delivered(self._neutral(), jnp.bool_(False), jnp.int32(-1), jnp.int32(-1),
                        jnp.int32(-1), jnp.bool_(False))
    start = self._start(params, jnp.array([0.0, 0.0, 1.0], jnp.float32),
                        jnp.array([1.0, 0.0, 0.0, 0.0], jnp.float32))
    z = jnp.int32(0)
    return State(start, jnp.int32(-1), z, z, held)

  def update(self, p: Params, s: State, imu_out: tp.Delivered, tick, q_true=None) -> State:
    """Processes the IMU's delivered output of `tick` (a step only when `new_data`).

    Args:
      imu_out: the IMU's `Delivered` (`sample.angular_velocity`, `sample.linear_acceleration`,
        `new_data`, `sample_tick`, `sequence`).
      tick: int32 current tick.
      q_true: `(4,)` true site attitude of `tick`; used only by `initial_attitude: truth`.

    Returns:
      The new state (its `held` is the component output).
    """
    new = imu_out.new_data
    smp = imu_out.sample
    first = s.last_tick < 0
    gyro, accel = smp.angular_velocity, smp.linear_acceleration
    estm = jax.tree.map(lambda a, b: jnp.where(first, a, b), self._start(p, accel, q_true),
                        s.est)
    dt = jnp.where(first, 0, imu_out.sample_tick - s.last_tick).astype(gyro.dtype) * self.dt
    ekfp = self.ekf_params(p)
    estm = self.estimator.step(ekfp, estm, gyro, accel, dt, new)
    rejected = ~est._accel_noise(ekfp, accel)[1] & new
    out = Sample(quat.canonical(self.estimator.attitude(estm)), estm.gyro_bias, estm.cov)
    h = s.held
    pick = lambda a, b: jnp.where(new, a, b)  # noqa: E731
    held = tp.Delivered(jax.tree.map(pick, out, h.sample), new,
                        pick(imu_out.sequence, h.sequence),
                        pick(imu_out.sample_tick, h.sample_tick),
                        pick(jnp.asarray(tick, jnp.int32), h.arrival_tick), h.valid | new)
    return State(jax.tree.map(lambda a, b: jnp.where(new | ~first, a, b), estm, s.est),
                 pick(imu_out.sample_tick, s.last_tick), s.updates + new.astype(jnp.int32),
                 s.rejected + rejected.astype(jnp.int32), held)

  def sense(self, p: Params, s: State, data, tick, dues, env) -> State:
    """One tick after physics: update from the IMU's output of this tick (`env[imu]`)."""
    del dues
    q_true = (self.imu.site_orientation(data) if self.cfg.initial_attitude == 'truth'
              else None)
    return self.update(p, s, env[self.imu.id], tick, q_true)

  def output(self, s: State) -> tp.Delivered:
    return s.held

  def status(self, s: State) -> dict:
    return {'accel_rejected': s.rejected}

  def truth(self, s: State, data) -> dict:
    """True attitude of the IMU site at this tick, `(4,)`, `w >= 0`."""
    del s
    return {'orientation': self.imu.site_orientation(data)}

  def describe(self) -> list[str]:
    c = self.cfg
    return [f'sample type {SAMPLE_TYPE}',
            f'estimator: {c.estimator} EKF (fibril_mjx.estimators), input: IMU component '
            f'{self.imu.id!r} (site {self.imu.sensors[0].site!r}), updates on its new_data, '
            'dt from sample ticks',
            f'initial attitude: {c.initial_attitude}; gravity {self.gravity:g} m/s² along '
            'world -z']


def _earlier_imu(cid: str, imu_id: str, origin, ctx: BuildContext) -> imu.Imu:
  """The `fibril_sim/imu` component `imu_id`, which must be listed before this one."""
  file, path = origin('imu')
  ids = [i for i, _ in ctx.entries]
  if imu_id == cid:
    raise ConfigError(file, path, f'must name a {imu.TYPE} component listed before this one; '
                      'it names this component', imu_id)
  if imu_id not in ids:
    raise ConfigError(file, path, 'no component of that id in the manifest'
                      + did_you_mean(imu_id, [i for i in ids if i != cid]), imu_id)
  j = ids.index(imu_id)
  if ctx.entries[j][1] != imu.TYPE:
    raise ConfigError(file, path, f'must name a {imu.TYPE} component; {imu_id!r} '
                      f'(components[{j}]) is a {ctx.entries[j][1]}', imu_id)
  if imu_id not in ctx.built:
    mine = ids.index(cid) if cid in ids else len(ids)
    raise ConfigError(file, path, f'must name a component listed before this one '
                      f'(components[{mine}]); {imu_id!r} is components[{j}]', imu_id)
  return ctx.built[imu_id]


def build(cid: str, raw, ctx: BuildContext, catalog) -> AttitudeEkf:
  """Validates the config and binds the IMU component (listed earlier in the manifest)."""
  cfg, fields = base.resolve_config(AttitudeEkfConfigModel, TYPE, raw, catalog=catalog,
                                    file=ctx.file, path=ctx.path)
  origin = base.field_origin(fields, ctx)
  return bind(cid, cfg, fields, ctx,
              _earlier_imu(cid, cfg.imu, origin, ctx))


def build_with_imu(cid: str, raw, ctx: BuildContext, catalog, imu_component: imu.Imu
                   ) -> AttitudeEkf:
  """`build` with the IMU component given directly (tests, programmatic use)."""
  cfg, fields = base.resolve_config(AttitudeEkfConfigModel, TYPE, raw, catalog=catalog,
                                    file=ctx.file, path=ctx.path)
  return bind(cid, cfg, fields, ctx, imu_component)


def bind(cid, cfg: AttitudeEkfConfigModel, fields, ctx: BuildContext, imu_c: imu.Imu
         ) -> AttitudeEkf:
  origin = base.field_origin(fields, ctx)
  g = np.asarray(ctx.model.opt.gravity, np.float64)
  g_norm = float(np.linalg.norm(g))
  if g_norm == 0 or np.linalg.norm(g[:2]) > 1e-9 * g_norm or g[2] > 0:
    raise ConfigError(*origin('imu'), "the MuJoCo model's gravity "
                      f'{[float(v) for v in g]} m/s² is not along world -z, which the '
                      'attitude EKF assumes (a still, level IMU reads +g on z)', cfg.imu)
  gravity = cfg.gravity_m_s2 if cfg.gravity_m_s2 is not None else g_norm
  return AttitudeEkf(cid, cfg, imu_c, float(gravity), ctx.dt, tuple(fields.items()))


# ------------------------------------------------------------------ host side (run, plots)


def attitude_error_rad(q_est, q_true):
  """Rotation angle between attitudes `(..., 4)` → `(...)` rad in [0, π], float64."""
  return report.angle_rad(q_true, q_est)


def tilt_error_rad(q_est, q_true):
  """Angle between the estimated and true gravity directions in the IMU frame (roll/pitch
  error independent of yaw) `(...)` rad, float64."""
  def up_in_body(q):
    q = np.asarray(q, np.float64)
    w, x, y, z = np.moveaxis(q, -1, 0)
    return np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), w * w - x * x - y * y + z * z],
                    -1)
  u, v = up_in_body(q_est), up_in_body(q_true)
  return np.arctan2(np.linalg.norm(np.cross(u, v), axis=-1), np.sum(u * v, axis=-1))


def host_metrics(sensor: dict, truth: dict) -> dict:
  """Per-world attitude error of the estimate vs the true site attitude at each update's
  sample tick (NumPy, float64).

  Returns:
    `{metric: (nworld,)}`: RMS and final attitude error (deg, includes yaw drift), RMS and
    final tilt error (deg, roll/pitch only), number of updates.
  """
  new = sensor['new_data'].astype(bool)
  st = np.clip(sensor['sample_tick'], 0, None)
  q_true = np.take_along_axis(truth['orientation'], st[..., None], axis=1)
  att = np.degrees(attitude_error_rad(sensor['orientation'], q_true))
  tilt = np.degrees(tilt_error_rad(sensor['orientation'], q_true))
  count = np.maximum(new.sum(axis=1), 1)
  idx = np.arange(new.shape[1])
  last = np.max(np.where(new, idx, 0), axis=1)   # last update (tick 0 if none)
  pick = lambda a: np.take_along_axis(a, last[:, None], axis=1)[:, 0]  # noqa: E731
  return {
      'attitude_error_rms_deg': np.sqrt((att ** 2 * new).sum(1) / count),
      'attitude_error_final_deg': pick(att),
      'tilt_error_rms_deg': np.sqrt((tilt ** 2 * new).sum(1) / count),
      'tilt_error_final_deg': pick(tilt),
      'updates': new.sum(axis=1),
  }


def plot(path, cid, time_s, sensor, truth, world, metrics, title):
  """Truth vs estimate (roll/pitch/yaw) for one world, the attitude error over time of the
  traced worlds with world `world`'s 3σ bound, and the error distribution across worlds."""
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt

  new_all = sensor['new_data'].astype(bool)
  st_all = np.clip(sensor['sample_tick'], 0, None)
  fig, axes = plt.subplots(3, 2, figsize=(13, 10))
  new = new_all[world]
  t_s = time_s[st_all[world]][new]
  r_true = report.rpy_deg(truth['orientation'][world])
  r_est = report.rpy_deg(sensor['orientation'][world])[new]
  for i, name in enumerate(('roll', 'pitch', 'yaw')):
    ax = axes[i, 0]
    ax.plot(time_s, r_true[:, i], 'k-', lw=1, label='truth (IMU site)')
    ax.plot(t_s, r_est[:, i], '-', lw=0.8, color='tab:red', label=f'{cid} estimate')
    ax.set_ylabel(f'{name} [deg]')
  axes[0, 0].legend(loc='upper right', fontsize=8)
  axes[0, 0].set_title(f'world {world}: attitude, truth vs estimate')
  axes[2, 0].set_xlabel('time [s]')

  ax = axes[0, 1]
  for w in range(new_all.shape[0]):
    nw = new_all[w]
    qt = np.take_along_axis(truth['orientation'][w], st_all[w][:, None], axis=0)
    err = np.degrees(attitude_error_rad(sensor['orientation'][w], qt))[nw]
    ax.plot(time_s[st_all[w]][nw], err, '-', lw=0.6, alpha=0.8 if w == world else 0.35,
            color='tab:red' if w == world else 'tab:gray')
  ax.set_yscale('log')
  ax.set_ylabel('attitude error [deg]')
  ax.set_title(f'attitude error of {new_all.shape[0]} traced worlds (red: world {world})')
  ax = axes[1, 1]
  qt = np.take_along_axis(truth['orientation'][world], st_all[world][:, None], axis=0)
  ax.plot(t_s, np.degrees(tilt_error_rad(sensor['orientation'][world], qt))[new], '-',
          color='tab:blue', lw=0.8, label='tilt (roll/pitch)')
  ax.plot(t_s, np.degrees(attitude_error_rad(sensor['orientation'][world], qt))[new], '-',
          color='tab:red', lw=0.8, label='full (incl. yaw)')
  # first two error-state axes: world x/y rotation (quaternion EKF) or roll/pitch (RPY EKF)
  cov = sensor['covariance'][world][new]
  ax.plot(t_s, 3 * np.degrees(np.sqrt(np.clip(cov[:, 0, 0] + cov[:, 1, 1], 0, None))), 'k--',
          lw=0.8, label='filter 3σ tilt, 3·√(P₀₀ + P₁₁)')
  ax.set_ylim(0, None)
  ax.set_ylabel('error [deg]')
  ax.set_xlabel('time [s]')
  ax.set_title(f'world {world}: tilt vs full attitude error')
  ax.legend(fontsize=8)
  ax = axes[2, 1]
  rms, tilt = metrics['attitude_error_rms_deg'], metrics['tilt_error_rms_deg']
  bins = min(40, max(5, len(rms) // 4))
  ax.hist(rms, bins=bins, color='tab:red', alpha=0.6, label='attitude (incl. yaw)')
  ax.hist(tilt, bins=bins, color='tab:blue', alpha=0.6, label='tilt')
  ax.set_xlabel('RMS error per world [deg]')
  ax.set_ylabel('worlds')
  ax.set_title(f'error distribution across {len(rms)} worlds')
  ax.legend(fontsize=8)
  fig.suptitle(title, fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
