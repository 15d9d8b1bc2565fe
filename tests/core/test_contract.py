"""The component contract (`core/protocol.py`): a toy sensor defined here only, added
through the public registration path, builds, plans and runs with no change to any other
module; roles are enforced; hashing comes from the static fields; per-world values for terms
compiled out of the graph are refused, and `vary=` compiles them in."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import fibril_mjx
from conftest import SCRIPT, ahrs_entry, write_rig
from fibril_mjx.workflows import plan, run as runner
from fibril_mjx.mechanisms import rng
from fibril_mjx.mechanisms import transport
from fibril_mjx.components import base
from fibril_mjx.core import registry
from fibril_mjx.core import protocol
from fibril_mjx.components.base import NonNeg
from fibril_mjx.errors import ConfigError, FibrilError
from fibril_mjx.mechanisms.schedule import Schedule
from fibril_mjx.config.validation import Strict

TOY = 'test/yaw_rate_toy'


# ------------------------------------------------------------------ a toy sensor, this file only

class ToyConfig(Strict):
  gyroscope_sensor: str
  period_s: float
  offset: float = 0.0
  noise_stddev: NonNeg = 0.0


class ToyParams(NamedTuple):
  offset: jax.Array
  noise_stddev: jax.Array


class ToySample(NamedTuple):
  yaw_rate: jax.Array


class ToyState(NamedTuple):
  streams: dict
  queue: transport.QueueState
  held: transport.Delivered


@dataclasses.dataclass(frozen=True)
class Toy(base.SensorBase):
  """Gyro z + offset + white noise, one sample per period (the common fields of
  `base.SensorBase`, keyword-only, and its own)."""
  adr: int

  type = TOY
  sample_type = 'test/yaw_rate_toy_sample/v1'
  params_type = ToyParams

  def init(self, params, world_key):
    streams = {s: rng.stream_key(world_key, self.id, s)
               for s in ('noise', 'delivery_jitter', 'delivery_loss')}
    queue, held = transport.init(self.transport, ToySample(jnp.float32(0.0)))
    return ToyState(streams, queue, held)

  def acquire(self, p, s, data, tick, n):
    y = data.sensordata[self.adr + 2]
    if self._on('offset'):
      y = y + p.offset
    if self._on('noise_stddev'):
      y = y + p.noise_stddev * rng.normal(s.streams['noise'], n)
    return s, ToySample(y)

  def truth(self, s, data):
    return {'yaw_rate': data.sensordata[self.adr + 2]}

  def describe(self):
    return self.describe_timing() + [f'gyro z at sensordata[{self.adr + 2}]']


def build_toy(cid, raw, ctx, catalog):
  cfg, fields = base.resolve_config(ToyConfig, TOY, raw, catalog=catalog, file=ctx.file,
                                    path=ctx.path)
  gyro = ctx.sensor('gyroscope_sensor', cfg.gyroscope_sensor, mujoco.mjtSensor.mjSENS_GYRO, 3)
  origin = base.field_origin(fields, ctx)
  sched = Schedule.build(cfg.period_s, 0.0, ctx.dt, 'next_boundary', origin=origin)
  tr = transport.Transport.build(0.0, 0.0, 0.0, cfg.period_s, ctx.dt, 'next_boundary',
                                 origin=origin)
  return Toy(gyro.adr, id=cid, cfg=cfg, schedule=sched, transport=tr, dt=ctx.dt,
             fields=tuple(fields.items()), vary=frozenset(ctx.vary))


def toy_metrics(sensor, truth):
  new = sensor['new_data']
  err = (sensor['yaw_rate'] - truth['yaw_rate']) * new
  return {'mean_error': err.sum(1) / np.maximum(new.sum(1), 1)}


@pytest.fixture(scope='module')
def toy_registered():
  fibril_mjx.register(TOY, build_toy, config_model=ToyConfig)
  fibril_mjx.register(TOY, metrics=toy_metrics)     # parts add up, call by call
  yield
  registry.unregister(TOY)


def toy_entry(cid='toy', **config):
  return {'id': cid, 'type': TOY, 'config': {'gyroscope_sensor': 'gyro', 'period_s': 0.004,
                                              **config}}


@pytest.fixture(scope='module')
def toy_sim(toy_registered, tmp_path_factory):
  path = write_rig(tmp_path_factory.mktemp('toy'), [toy_entry(offset=0.25)])
  return fibril_mjx.load(path)


def test_toy_sensor_builds_plans_and_runs(toy_sim):
  c = toy_sim.components['toy']
  assert c.roles == frozenset({protocol.SENSOR}) and isinstance(c, protocol.Sensor)
  text = plan.render(toy_sim)
  assert 'toy (test/yaw_rate_toy)' in text and 'gyro z at sensordata[6]' in text
  _, tr, _ = toy_sim.rollout(toy_sim.default_params(3), fibril_mjx.world_keys(0, 3), 40)
  d = tr['sensor']['toy']
  new = np.asarray(d.new_data)
  assert new[:, ::2].all() and not new[:, 1::2].any()     # period 2 ticks, no latency
  got = np.asarray(d.sample.yaw_rate)[new]
  want = np.asarray(tr['truth']['toy']['yaw_rate'])[new] + 0.25
  np.testing.assert_allclose(got, want, atol=1e-6)


def test_toy_sensor_through_the_cli_runner(toy_sim, tmp_path):
  path = toy_sim.manifest.path
  summary = runner.run(path, worlds=2, seed=0, duration_s=0.04, out=tmp_path / 'out',
                       options=runner.RunOptions(trace_worlds=1))
  mean = summary['components']['toy']['metrics']['mean_error']['mean']
  assert mean == pytest.approx(0.25, abs=1e-5)


def test_unknown_type_lists_the_registered_ones(toy_registered, tmp_path):
  path = write_rig(tmp_path, [toy_entry(), {'id': 'x', 'type': 'test/yaw_rate_tyo',
                                            'config': {}}])
  with pytest.raises(ConfigError, match=r"components\[1\]\.type.*did you mean 'test/yaw_rate_toy'"):
    fibril_mjx.load(path)


def test_registering_twice_is_an_error(toy_registered):
  with pytest.raises(ValueError, match='already registered'):
    fibril_mjx.register(TOY, build_toy)


def test_roles_are_checked_at_build():
  @dataclasses.dataclass(frozen=True)
  class NoSense(base.ComponentBase):
    id: str = 'x'
    fields: tuple = ()
    roles = frozenset({protocol.SENSOR})
  with pytest.raises(TypeError, match='declares roles .*sensor.* but lacks .*sense'):
    protocol.check(NoSense())

  @dataclasses.dataclass(frozen=True)
  class NoRoles(base.ComponentBase):
    id: str = 'x'
  with pytest.raises(TypeError, match='roles must be a non-empty subset'):
    protocol.check(NoRoles())


def test_hash_and_equality_come_from_static_fields(toy_registered, tmp_path):
  a = fibril_mjx.load(write_rig(tmp_path / 'a', [toy_entry(offset=0.25)]))
  b = fibril_mjx.load(write_rig(tmp_path / 'b', [toy_entry(offset=0.25)]))
  c = fibril_mjx.load(write_rig(tmp_path / 'c', [toy_entry(offset=0.5)]))
  assert a.components['toy'] == b.components['toy']
  assert hash(a.components['toy']) == hash(b.components['toy'])
  assert a.components['toy'] != c.components['toy']
  assert hash(a.built) == hash(b.built) and a.built == b.built and a.built != c.built


def test_every_builtin_component_declares_roles(tmp_path):
  for name in ('ahrs_turntable', 'imu_ekf', 'leg_robstride', 'wheeled_base'):
    sim = fibril_mjx.load(f'manifests/{name}.yaml')
    for c in sim.components.values():
      protocol.check(c)
      hash(c)


# ------------------------------------------------------------------ per-world values (vary)

@pytest.fixture(scope='module')
def imu_manifest(tmp_path_factory):
  entry = {'id': 'imu', 'type': 'fibril_sim/imu',
           'config': {'gyroscope_sensor': 'gyro', 'accelerometer_sensor': 'accel',
                      'period_s': 0.004}}
  return write_rig(tmp_path_factory.mktemp('imu'), [entry], script=SCRIPT)


def test_per_world_value_for_a_compiled_out_term_is_an_error(imu_manifest):
  sim = fibril_mjx.load(imu_manifest)
  c = sim.components['imu']
  assert 'angular_velocity_bias' in c.compiled_out()
  p = sim.default_params(2)
  p['imu'] = c.set_param(p['imu'], 'angular_velocity_bias',
                         jnp.array([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]]))
  with pytest.raises(FibrilError, match=r"component 'imu' \(fibril_sim/imu\) field "
                     r"'angular_velocity_bias': per-world values differ .* compiled out .*"
                     r"vary=\{'imu': \['angular_velocity_bias'\]\}"):
    sim.reset(p, fibril_mjx.world_keys(0, 2))


def test_vary_compiles_the_term_in_and_the_value_takes_effect(imu_manifest):
  sim = fibril_mjx.load(imu_manifest, vary={'imu': ['angular_velocity_bias']})
  c = sim.components['imu']
  p = sim.default_params(2)
  p['imu'] = c.set_param(p['imu'], 'angular_velocity_bias',
                         jnp.array([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]]))
  keys = jnp.stack([fibril_mjx.world_keys(0, 1)[0]] * 2)
  _, tr, _ = sim.rollout(p, keys, 10)
  w = np.asarray(tr['sensor']['imu'].sample.angular_velocity)
  valid = np.asarray(tr['sensor']['imu'].valid[0])
  np.testing.assert_allclose((w[1] - w[0])[valid], np.broadcast_to([1, 2, 3], (valid.sum(), 3)),
                             atol=1e-5)


def test_vary_makes_ahrs_noise_std_take_effect_with_a_gradient(tmp_path):
  path = write_rig(tmp_path, [ahrs_entry(period_s=0.004)])
  with pytest.raises(FibrilError, match="angular_velocity_noise_stddev"):
    sim0 = fibril_mjx.load(path)
    p = sim0.default_params(1)
    p['ahrs'] = sim0.components['ahrs'].set_param(p['ahrs'], 'angular_velocity_noise_stddev',
                                                  jnp.ones((1, 3)))
    sim0.reset(p, fibril_mjx.world_keys(0, 1))
  sim = fibril_mjx.load(path, vary={'ahrs': ['angular_velocity_noise_stddev']})
  c = sim.components['ahrs']
  keys = fibril_mjx.world_keys(0, 64)
  p0 = sim.default_params(64)

  def spread(std):
    p = dict(p0)
    p['ahrs'] = c.set_param(p0['ahrs'], 'angular_velocity_noise_stddev',
                            jnp.broadcast_to(std, (64, 3)))
    st = sim.reset(p, keys)
    out = sim.outputs(st)
    e = out['sensor']['ahrs'].sample.angular_velocity - out['truth']['ahrs']['angular_velocity']
    return jnp.sum(e ** 2)

  total = float(spread(jnp.float32(1.0)))
  assert total == pytest.approx(64 * 3, rel=5 * np.sqrt(2 / (64 * 3)))   # χ² of 192 draws
  # jitted: one program (an eager grad runs MJX's forward op by op: ~450 small compiles)
  g = float(jax.jit(jax.grad(spread))(jnp.float32(1.0)))
  assert g == pytest.approx(2 * total, rel=1e-4)      # d/dσ Σ(σz)² = 2Σσz²/σ


def test_vary_rejects_unknown_component_and_static_field(imu_manifest):
  with pytest.raises(ConfigError, match=r"vary = 'imx': no component of that id.*'imu'"):
    fibril_mjx.load(imu_manifest, vary={'imx': ['angular_velocity_bias']})
  with pytest.raises(ConfigError, match=r"vary\.imu = 'period_s': not a per-world field"):
    fibril_mjx.load(imu_manifest, vary={'imu': ['period_s']})
  with pytest.raises(ConfigError, match=r"did you mean 'angular_velocity_bias'"):
    fibril_mjx.load(imu_manifest, vary={'imu': ['angular_velocity_bais']})
