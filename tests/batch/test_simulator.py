"""Simulator transforms and determinism on a tiny MJX rig (module-scoped compiled sims).

Every rollout of `sim` runs 1, 8 or 64 worlds for `TICKS` ticks, so the file compiles one
program per world count (a chunked run reuses them): each distinct count, tick count, record
flag or model argument is a trace and a compile of its own.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fibril_mjx
from ref_helpers import tree_equal
from conftest import SENSORS2, ahrs_entry, write_rig
from fibril_mjx.batch.simulation import Controller, Options, Rollout

NOISY = dict(period_s=0.006, latency_s=0.004, jitter_s=0.003, loss_probability=0.1,
             angular_velocity_noise_stddev=[0.01, 0.02, 0.03],
             angular_velocity_noise_correlation=[0.5, 0.5, 0.5],
             linear_acceleration_noise_stddev=[0.1, 0.1, 0.1],
             orientation_noise_stddev_rad=[0.01, 0.01, 0.02], yaw_rate_bias_stddev_rad_s=0.01,
             orientation_bandwidth_hz=5.0, angular_velocity_bandwidth_hz=20.0)
TICKS = 60


@pytest.fixture(scope='module')
def sim(tmp_path_factory):
  # Per-world bias and scale: compiled in although the manifest leaves them at the default.
  return fibril_mjx.load(write_rig(tmp_path_factory.mktemp('one'), [ahrs_entry(**NOISY)]),
                         vary={'ahrs': VARIED})


VARIED = ['angular_velocity_bias', 'angular_velocity_scale', 'linear_acceleration_scale']


@pytest.fixture(scope='module')
def sim_two(tmp_path_factory):
  comps = [ahrs_entry(**NOISY), ahrs_entry('ahrs_b', SENSORS2, **NOISY)]
  return fibril_mjx.load(write_rig(tmp_path_factory.mktemp('two'), comps))


def rollout(sim, worlds, first=0, seed=0, chunk=1024, ticks=TICKS):
  keys = fibril_mjx.world_keys(seed, worlds, first)
  _, trace, _ = sim.rollout(sim.default_params(worlds), keys, ticks,
                            options=Options(chunk_worlds=chunk))
  return jax.tree.map(np.asarray, trace)


@pytest.fixture(scope='module')
def run8(sim):
  """`(final state, trace)` of worlds 0-7 (seed 0)."""
  final, trace, _ = sim.rollout(sim.default_params(8), fibril_mjx.world_keys(0, 8), TICKS)
  return final, jax.tree.map(np.asarray, trace)


@pytest.fixture(scope='module')
def batch8(run8):
  return run8[1]


@pytest.fixture(scope='module')
def batch64(sim):
  return rollout(sim, 64)


def test_trace_separates_truth_from_sensor(batch8):
  assert set(batch8) == {'sensor', 'truth'}
  s = batch8['sensor']['ahrs']
  assert s.sample.orientation.shape == (8, TICKS + 1, 4)
  assert set(batch8['truth']['ahrs']) == {'orientation', 'angular_velocity',
                                          'linear_acceleration', 'health'}


def test_worlds_differ_and_same_seed_repeats(sim, batch8):
  w = batch8['sensor']['ahrs'].sample.angular_velocity
  assert not np.array_equal(w[0], w[1])
  tree_equal(batch8, rollout(sim, 8))
  assert not np.array_equal(rollout(sim, 8, seed=1)['sensor']['ahrs'].sample.angular_velocity,
                            w)


def test_world_alone_equals_world_in_batch_of_64(sim, batch8, batch64):
  """World 5 run alone (batch of 1), in a batch of 8, and in a batch of 64: bitwise equal."""
  alone = rollout(sim, 1, first=5)
  pick = lambda t, i: jax.tree.map(lambda x: x[i:i + 1], t)  # noqa: E731
  tree_equal(alone, pick(batch8, 5))
  tree_equal(alone, pick(batch64, 5))


def test_chunking_does_not_change_results(sim, batch64):
  """Worlds 0-8 in host chunks of 8 and 1 (an uneven last chunk, offset keys) equal the same
  worlds of one unchunked batch of 64 (the chunks reuse the 8- and 1-world programs)."""
  tree_equal(rollout(sim, 9, chunk=8), jax.tree.map(lambda x: x[:9], batch64))


def test_vmap_equals_loop_of_single_worlds(sim, batch8):
  for w in range(8):
    single = rollout(sim, 1, first=w)
    tree_equal(single, jax.tree.map(lambda x: x[w:w + 1], batch8))


def test_adding_a_component_leaves_the_first_unchanged(sim_two, batch8):
  two = rollout(sim_two, 8)
  tree_equal(two['sensor']['ahrs'], batch8['sensor']['ahrs'])
  assert not np.array_equal(two['sensor']['ahrs_b'].sample.angular_velocity,
                            batch8['sensor']['ahrs'].sample.angular_velocity)


def test_no_retrace_on_second_rollout(sim):
  rollout(sim, 8)
  sizes = lambda: {k: p._cache_size() for k, p in sim._programs.items()}  # noqa: E731
  before = sizes()
  rollout(sim, 8)
  params = jax.tree.map(lambda x: x * 1.01, sim.default_params(8))   # new values, same shapes
  default = sim.default_params(8)
  for cid, c in sim.components.items():   # a compiled-out term must keep its manifest value
    for f in c.compiled_out():
      params[cid] = c.set_param(params[cid], f, c.get_param(default[cid], f))
  sim.rollout(params, fibril_mjx.world_keys(3, 8), TICKS)
  assert sizes() == before


def test_delivery_follows_schedule_latency_and_loss(batch8):
  s = batch8['sensor']['ahrs']
  new = s.new_data
  # period 0.006 s = 3 ticks: acquisitions at ticks 0, 3, 6, ...; sequence n ↔ tick 3n
  np.testing.assert_array_equal(s.sample_tick[new], 3 * s.sequence[new])
  lat = s.arrival_tick[new] - s.sample_tick[new]
  assert lat.min() >= 0 and np.all(s.arrival_tick[new] == np.nonzero(new)[1])
  for w in range(8):
    seq = s.sequence[w][new[w]]
    assert np.all(np.diff(seq) > 0)
  # delay = max(0, 0.004 + 0.003 z): mostly 2 ticks, clipped at 0, never negative
  assert np.median(lat) == 2 and lat.max() > 2
  np.testing.assert_array_equal(s.valid, np.maximum.accumulate(new, axis=1))


def test_per_world_params_take_effect(sim):
  """Eight worlds with the same noise (the batch-of-8 program), world 1 with a gyro bias."""
  p = sim.default_params(8)
  bias = np.zeros((8, 3), np.float32)
  bias[1] = [1.0, 2.0, 3.0]
  p['ahrs'] = sim.components['ahrs'].set_param(p['ahrs'], 'angular_velocity_bias', bias)
  keys = np.repeat(np.asarray(fibril_mjx.world_keys(0, 1)), 8, axis=0)   # same noise in all
  _, tr, _ = sim.rollout(p, keys, TICKS)
  s = tr['sensor']['ahrs']
  d = np.asarray(s.sample.angular_velocity[1] - s.sample.angular_velocity[0])[np.asarray(
      s.valid[0])]
  np.testing.assert_allclose(d, np.broadcast_to([1.0, 2.0, 3.0], d.shape), atol=1e-5)


def test_tick_zero_is_an_acquisition_instant(tmp_path):
  sim0 = fibril_mjx.load(write_rig(tmp_path, [ahrs_entry(period_s=0.004)]))
  # sub_batch=2: what 2 worlds always get; passing it spares the LAPACK-size analysis (a trace)
  st = sim0.reset(sim0.default_params(2), fibril_mjx.world_keys(0, 2), options=Options(sub_batch=2))
  out = sim0.outputs(st)
  d = out['sensor']['ahrs']
  assert bool(d.new_data.all()) and int(d.sequence[0]) == 0 and int(d.sample_tick[0]) == 0
  np.testing.assert_allclose(d.sample.angular_velocity, out['truth']['ahrs']['angular_velocity'],
                             atol=1e-6)


def test_gradient_through_physics_and_ahrs(sim):
  """d(sum of delivered gyro)/d(gyro bias) through a rollout equals the delivered count."""
  keys = fibril_mjx.world_keys(0, 2)
  p0 = sim.default_params(2)

  def loss(bias):
    p = dict(p0)
    p['ahrs'] = sim.components['ahrs'].set_param(p0['ahrs'], 'angular_velocity_bias', bias)
    st = sim.reset(p, keys)
    st, outs, _ = sim.run(p, st, 20)
    return jnp.sum(outs['sensor']['ahrs'].sample.angular_velocity[-1])

  g = jax.jit(jax.grad(loss))(
      sim.components['ahrs'].get_param(p0['ahrs'], 'angular_velocity_bias'))
  np.testing.assert_allclose(g, 1.0, atol=1e-6)  # last held sample: d/d bias = 1 per axis


def test_physics_stays_finite(batch8):
  for leaf in jax.tree.leaves(batch8):
    if np.issubdtype(leaf.dtype, np.floating):
      assert np.isfinite(leaf).all()


def test_model_argument_replaces_the_embedded_model(sim, run8):
  """`model=` (traced as an argument; reset and run take it) against the embedded model of
  the batch-of-8 run: the same physics; a model with 50x the damping moves less."""
  keys = fibril_mjx.world_keys(0, 8)
  p = sim.default_params(8)
  a = run8[0]
  b, _, _ = sim.rollout(p, keys, TICKS, model=sim.mx, options=Options(record=False))
  np.testing.assert_allclose(a.data.qpos, b.data.qpos, atol=1e-5)
  damped = sim.mx.replace(dof_damping=sim.mx.dof_damping * 50)
  c, _, _ = sim.rollout(p, keys, TICKS, model=damped, options=Options(record=False))
  assert np.abs(np.asarray(c.data.qvel)).max() < np.abs(np.asarray(a.data.qvel)).max()


# ------------------------------------------------------------------ gradients through physics

GRAD_TICKS = 150        # 0.3 s: the yaw stage spins up towards kv·u/(kv + d)


@pytest.fixture(scope='module')
def grad_sim(tmp_path_factory):
  """The rig's yaw joint driven by a fibril_sim/motor (velocity input, uncommanded: its
  `safe_command` is the setpoint) and an AHRS without resolution (rounding has zero
  derivative) on the tilt stage; no contacts or limits, so no constraint rows."""
  motor = {'id': 'yaw', 'type': 'fibril_sim/motor',
           'config': {'actuator': 'yaw_motor', 'application_period_s': 0.004,
                      'safe_command': 1.5}}
  ahrs = ahrs_entry(period_s=0.004, angular_velocity_bandwidth_hz=20.0)
  return fibril_mjx.load(write_rig(tmp_path_factory.mktemp('grad'), [motor, ahrs], script=[]))


def test_gradient_of_a_sensor_output_through_physics_wrt_mjcf_and_component_fields(grad_sim):
  """d(sum of delivered AHRS gyro z over 150 ticks) / d(yaw dof_damping, an MJCF field passed
  with `model=`) and / d(motor safe_command, a component field: the velocity setpoint) through
  Simulation.reset/run — MJX physics, the MJX gyro sensor, the AHRS filter and delivery —
  by forward mode against central finite differences. (The former gradient test only
  differentiated an additive AHRS bias, which never touches the physics.)"""
  from finite_diff import central_differences
  sim = grad_sim
  keys = fibril_mjx.world_keys(0, 2)
  p0 = sim.default_params(2)
  dof = sim.components['yaw'].binding.dofadr

  def loss(theta):
    p = dict(p0)
    p['yaw'] = p0['yaw']._replace(safe_command=jnp.full((2,), theta[1]))
    model = sim.mx.replace(dof_damping=sim.mx.dof_damping.at[dof].set(theta[0]))
    st = sim.reset(p, keys, model=model)
    _, outs, _ = sim.run(p, st, GRAD_TICKS, model=model)
    d = outs['sensor']['ahrs']
    return jnp.sum(jnp.where(d.new_data, d.sample.angular_velocity[..., 2], 0.0)) / 2

  theta0 = jnp.array([0.2, 1.5], jnp.float32)
  # jitted as a user would: one trace (eager, every primitive of the jvp is its own program)
  grad = np.asarray(jax.jit(jax.jacfwd(loss))(theta0), np.float64)
  fd = central_differences(jax.jit(loss), theta0, rel_step=2e-2)   # one program, 4 calls
  assert grad[0] < 0 < grad[1]                 # more damping: slower; larger setpoint: faster
  np.testing.assert_allclose(grad, fd, rtol=2e-2)


def test_every_program_of_a_model_reuses_one_trace_of_its_physics(tmp_path, monkeypatch):
  """A rollout, a reset and a step of one model run MJX's Python `forward` once: the physics
  is jitted (`fibril_mjx.physics.mjx`), so each later program batches that trace as a jaxpr
  instead of tracing MJX again (without the jit: 6 calls here). The rig has a third geom, a
  shape no other test's model has, so no other test's trace is reused (the jit's cache keys
  on shapes and structure, not on values)."""
  from conftest import RIG_XML
  from fibril_mjx.physics import mjx as physics
  path = write_rig(tmp_path, [ahrs_entry(period_s=0.004)])
  (tmp_path / 'rig.xml').write_text(RIG_XML.replace(
      '<site name="imu2"', '<geom type="sphere" size="0.01" mass="0.01" contype="0" '
      'conaffinity="0"/>\n<site name="imu2"', 1))
  calls, real = [], physics._mjx.forward
  monkeypatch.setattr(physics._mjx, 'forward', lambda m, d: calls.append(1) or real(m, d))
  sim = fibril_mjx.load(path)
  p, keys = sim.default_params(2), fibril_mjx.world_keys(0, 2)
  sim.rollout(p, keys, 2)
  sim.step(p, sim.reset(p, keys))
  assert len(calls) == 1


def test_a_command_trace_and_a_controller_together_are_refused(tmp_path):
  """A rollout's controller issues the commands of ticks 1 … n and tick 0 gets the scripted or
  null ones (the loop holds tick 0's code once: `batched.run`), so a command trace beside it
  would be dropped: refused in one line, before anything runs."""
  motor = {'id': 'mot', 'type': 'fibril_sim/motor',
           'config': {'actuator': 'yaw_motor', 'application_period_s': 0.002,
                      'feedback_period_s': 0.002}}
  sim = fibril_mjx.load(write_rig(tmp_path, [motor], script=[]))
  null = sim.null_commands()['mot']
  trace = {'mot': jax.tree.map(lambda z: jnp.zeros((3, 2) + jnp.shape(z), z.dtype), null)}
  ctl = lambda obs, c: ({'mot': null}, c)   # noqa: E731
  with pytest.raises(fibril_mjx.FibrilError, match=r'commands= and controller= together: the '
                     r'controller issues the commands of ticks 1 … n and tick 0 the scripted '
                     r'or null ones; pass one of them'):
    sim.rollout(sim.default_params(2), fibril_mjx.world_keys(0, 2), 3, commands=trace,
                controller=Controller(ctl, init=jnp.float32(0)))


def test_each_verb_has_one_return_shape_and_a_controller_carry_per_world(sim):
  """`rollout` returns `Rollout(state, trace, carry)` and `run` `(state, outputs, carry)`, with
  or without a controller (carry None without). A counting policy's carry counts its calls:
  one per tick after tick 0; `init` is one world's carry, broadcast, or with `per_world` one
  per world."""
  p, keys = sim.default_params(2), fibril_mjx.world_keys(0, 2)
  quiet = Options(record=False, sub_batch=2)
  count = lambda obs, c: ({}, c + 1)   # noqa: E731
  plain = sim.rollout(p, keys, 3, options=quiet)
  assert isinstance(plain, Rollout) and plain.trace is None and plain.carry is None
  loop = sim.rollout(p, keys, 3, controller=Controller(count, init=jnp.int32(0)), options=quiet)
  np.testing.assert_array_equal(loop.carry, [3, 3])
  per_world = Controller(count, init=loop.carry + jnp.array([0, 10], jnp.int32), per_world=True)
  st, outs, carry = sim.run(p, loop.state, 2, controller=per_world, options=quiet)
  assert outs is None
  np.testing.assert_array_equal(carry, [5, 15])
  st, outs, carry = sim.run(p, st, 2, options=Options(sub_batch=2))
  assert carry is None and int(st.tick) == 7
  assert all(x.shape[:2] == (2, 2) for x in jax.tree.leaves(outs))   # (n_ticks, nworld, ...)
