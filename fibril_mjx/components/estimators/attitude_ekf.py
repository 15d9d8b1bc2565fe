"""`fibril_mjx/attitude_ekf` — an attitude EKF in the loop, fed by a `fibril_sim/imu` (SPEC §7).

Wraps the pure estimators of `fibril_mjx.mechanisms.estimators` (quaternion error-state EKF or the RPY
EKF, config `estimator`) as a component so rollouts and campaigns score estimation error
against truth:

- **input**: the delivered output of the IMU component named by `imu` (it must be listed
  earlier in the manifest, so it is sensed first in each tick and its `Delivered` is in `env`);
- **update**: on every tick the IMU delivers (`new_data`), one predict (gyro) + update
  (accelerometer, with gating) step over `dt = (sample_tick − previous sample_tick)·dt_physics`
  — the time between the samples actually processed, so lost samples and several samples
  released in one tick (only the latest is visible) lengthen the step instead of breaking it;
  a delivered sample with a non-finite angular velocity or acceleration (a device sending NaN
  or Inf, `faults` type `nan`) is discarded as a driver would and counted (`discarded`); the
  next finite sample's step spans the gap. Samples with an invalid status but finite numbers
  are processed (the component does not read `health`);
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

from fibril_mjx.mechanisms import host
from fibril_mjx.mechanisms import estimators, fifo
from fibril_mjx.mechanisms import quat
from fibril_mjx.mechanisms import transport as tp
from fibril_mjx.core.context import BuildContext
from fibril_mjx.components import base
from fibril_mjx.components.sensors import imu
from fibril_mjx.core import protocol
from fibril_mjx.components.base import NonNeg, NonNeg3, Positive, Positive3, Vec3
from fibril_mjx.errors import ConfigError, did_you_mean
from fibril_mjx.config.validation import Strict

TYPE = 'fibril_mjx/attitude_ekf'
SAMPLE_TYPE = 'fibril_mjx/attitude_estimate/v1'


class AttitudeEkfConfigModel(Strict):
  """Validated manifest config of `fibril_mjx/attitude_ekf`.

  Noise model (IEEE-952 / Kalibr units): `gyro_noise_density` rad/s/√Hz,
  `gyro_bias_random_walk` rad/s/√s, `accel_noise_stddev_m_s2` per sample. Gating on
  `e = | ‖a‖ − g |`: above `accel_gate_m_s2` the accelerometer variance is inflated by
  `accel_inflation_gain² · (e − gate)²` (a smooth inflation, C¹ at the gate), above
  `accel_reject_m_s2` the update is skipped (0 = never skip). `lever_arm_m`: the IMU's position
  relative to a reference point of its rigid body (a pivot, the centre of mass), IMU frame —
  known mounting geometry; the filter removes `α × r + ω × (ω × r)` from each sample (zeros: off).
  `gravity_m_s2` defaults to the norm of the model's gravity.
  """
  imu: str
  estimator: Literal['quaternion', 'rpy'] = 'quaternion'
  gyro_noise_density: NonNeg3 = (1e-3, 1e-3, 1e-3)
  gyro_bias_random_walk: NonNeg3 = (1e-5, 1e-5, 1e-5)
  accel_noise_stddev_m_s2: Positive3 = (0.05, 0.05, 0.05)
  accel_gate_m_s2: NonNeg = 0.5
  accel_reject_m_s2: NonNeg = 3.0
  accel_inflation_gain: NonNeg = 1.0
  lever_arm_m: Vec3 = (0.0, 0.0, 0.0)
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
  accel_inflation_gain: jax.Array
  lever_arm_m: jax.Array
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
    discarded: int32 delivered samples skipped because a value was not finite.
  """
  est: Any
  last_tick: jax.Array
  updates: jax.Array
  rejected: jax.Array
  held: tp.Delivered
  discarded: jax.Array


@dataclasses.dataclass(frozen=True)
class AttitudeEkf(base.ComponentBase):
  """A built `fibril_mjx/attitude_ekf` component (static, hashable).

  Attributes:
    imu: the bound `fibril_sim/imu` component (for its site and id).
    gravity: resolved gravity magnitude, m/s².
  """
  reads_sensors_only = True
  id: str
  cfg: AttitudeEkfConfigModel
  imu: imu.Imu
  gravity: float
  dt: float
  fields: tuple = dataclasses.field(compare=False)

  type = TYPE
  sample_type = SAMPLE_TYPE
  roles = frozenset({protocol.ESTIMATOR})
  params_type = Params
  stochastic = ()   # draws nothing: its noise densities are the filter's model, not noise


  @property
  def estimator(self) -> estimators.Estimator:
    return estimators.quat_ekf() if self.cfg.estimator == 'quaternion' else estimators.rpy_ekf()

  def default_params(self) -> Params:
    vals = {f: getattr(self.cfg, f) for f in Params._fields}
    vals['gravity_m_s2'] = self.gravity
    return Params(*(host.array(vals[f]) for f in Params._fields))

  def ekf_params(self, p: Params) -> estimators.EkfParams:
    reject = p.accel_reject_m_s2
    if self.cfg.accel_reject_m_s2 == 0:
      reject = jnp.full_like(reject, jnp.inf)
    return estimators.EkfParams(p.gyro_noise_density, p.gyro_bias_random_walk,
                         p.accel_noise_stddev_m_s2, p.accel_gate_m_s2, reject, p.gravity_m_s2,
                         p.accel_inflation_gain, p.lever_arm_m)

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
      q0 = quat.from_rpy(estimators.tilt_from_accel(a, p.initial_rpy_rad[2]))
    elif mode == 'truth':
      q0 = q_true
    else:
      q0 = quat.from_rpy(p.initial_rpy_rad)
    if base.is_set(self.cfg, 'initial_attitude_offset_rad'):
      q0 = quat.multiply(q0, quat.from_rpy(p.initial_attitude_offset_rad))
    ekfp = self.ekf_params(p)
    bias0 = p.initial_gyro_bias_rad_s
    if self.cfg.estimator == 'quaternion':
      return estimators.quat_ekf_init(ekfp, q0, p.initial_attitude_stddev_rad,
                               p.initial_gyro_bias_stddev_rad_s, bias0)
    return estimators.rpy_ekf_init(ekfp, quat.to_rpy(q0), p.initial_attitude_stddev_rad,
                            p.initial_gyro_bias_stddev_rad_s, bias0)

  def init(self, params: Params, world_key: jax.Array) -> State:
    del world_key  # deterministic given its input
    held = tp.Delivered(self._neutral(), jnp.bool_(False), jnp.int32(-1), jnp.int32(-1),
                        jnp.int32(-1), jnp.bool_(False))
    start = self._start(params, jnp.array([0.0, 0.0, 1.0], jnp.float32),
                        jnp.array([1.0, 0.0, 0.0, 0.0], jnp.float32))
    z = jnp.int32(0)
    return State(start, jnp.int32(-1), z, z, held, z)

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
    smp = imu_out.sample
    finite = jnp.all(jnp.isfinite(smp.angular_velocity)) & jnp.all(
        jnp.isfinite(smp.linear_acceleration))
    new = imu_out.new_data & finite
    discarded = imu_out.new_data & ~finite
    first = s.last_tick < 0
    # a discarded sample never reaches the arithmetic (no NaN in the untaken branch either,
    # so gradients stay finite)
    gyro = jnp.where(finite, smp.angular_velocity, 0.0)
    accel = jnp.where(finite, smp.linear_acceleration, jnp.array([0.0, 0.0, 1.0], gyro.dtype))
    estm = jax.tree.map(lambda a, b: jnp.where(first, a, b), self._start(p, accel, q_true),
                        s.est)
    dt = jnp.where(first, 0, imu_out.sample_tick - s.last_tick).astype(gyro.dtype) * self.dt
    ekfp = self.ekf_params(p)
    rejected = ~estimators.accel_accepted(ekfp, estimators.compensated_accel(ekfp, estm, gyro, accel, dt)) & new
    estm = self.estimator.step(ekfp, estm, gyro, accel, dt, new)
    out = Sample(quat.canonical(self.estimator.attitude(estm)), estm.gyro_bias, estm.cov)
    h = s.held
    pick = lambda a, b: jnp.where(new, a, b)  # noqa: E731
    held = tp.Delivered(jax.tree.map(pick, out, h.sample), new,
                        pick(imu_out.sequence, h.sequence),
                        pick(imu_out.sample_tick, h.sample_tick),
                        pick(jnp.asarray(tick, jnp.int32), h.arrival_tick), h.valid | new)
    return State(jax.tree.map(lambda a, b: jnp.where(new | ~first, a, b), estm, s.est),
                 pick(imu_out.sample_tick, s.last_tick), s.updates + new.astype(jnp.int32),
                 s.rejected + rejected.astype(jnp.int32), held,
                 s.discarded + discarded.astype(jnp.int32))

  def sense(self, p: Params, s: State, data, tick, dues, env) -> State:
    """One tick after physics: update from the IMU's output of this tick (`env[imu]`)."""
    del dues
    q_true = (self.imu.site_orientation(data) if self.cfg.initial_attitude == 'truth'
              else None)
    return self.update(p, s, env[self.imu.id], tick, q_true)

  def output(self, s: State) -> tp.Delivered:
    return s.held

  def status(self, s: State) -> dict:
    return {'accel_rejected': s.rejected, 'samples_discarded': s.discarded}

  def truth(self, s: State, data) -> dict:
    """True attitude of the IMU site at this tick, `(4,)`, `w >= 0`."""
    del s
    return {'orientation': self.imu.site_orientation(data)}

  def describe(self) -> list[str]:
    c = self.cfg
    return [f'sample type {SAMPLE_TYPE}',
            f'estimator: {c.estimator} EKF (fibril_mjx.mechanisms.estimators), input: IMU component '
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
  if isinstance(imu_c.transport, fifo.Fifo):
    raise ConfigError(*origin('imu'), f'the attitude EKF reads one IMU sample per tick; '
                      f'{imu_c.id!r} delivers FIFO batches (delivery: fifo), not supported yet',
                      cfg.imu)
  g = np.asarray(ctx.model.opt.gravity, np.float64)
  g_norm = float(np.linalg.norm(g))
  if g_norm == 0 or np.linalg.norm(g[:2]) > 1e-9 * g_norm or g[2] > 0:
    raise ConfigError(*origin('imu'), "the MuJoCo model's gravity "
                      f'{[float(v) for v in g]} m/s² is not along world -z, which the '
                      'attitude EKF assumes (a still, level IMU reads +g on z)', cfg.imu)
  gravity = cfg.gravity_m_s2 if cfg.gravity_m_s2 is not None else g_norm
  return AttitudeEkf(cid, cfg, imu_c, float(gravity), ctx.dt, tuple(fields.items()))


CONFIG_MODEL = AttitudeEkfConfigModel

# The registration: this module is the type (found by the builder walking components/).
from fibril_mjx.core import registry  # noqa: E402
registry.register(TYPE, build=build, config_model=CONFIG_MODEL)
