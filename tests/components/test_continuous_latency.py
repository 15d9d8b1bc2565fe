"""Continuous actuator latency (`fibril_sim/scalar_actuator` `latency_mode: continuous`,
`fibril_sim/motor` `command_latency_mode: continuous`) and the fractional arrival of a sensor
sample.

- the ctrl sequence against a float64 NumPy model written here: the mean over each physics
  tick of the command held at the actuator (each command from its arrival `m + L` on), for
  fractional latencies, whole ones (bitwise the tick mode's ctrl) and the clamp;
- its derivative in the latency against the closed form, and a physics loss's forward-mode
  derivative against central differences;
- a vmap over per-world latencies against a loop over single worlds;
- an encoder sample with a fractional latency is delivered at the first tick at or after its
  arrival (NumPy);
- every config rule by its message;
- the motor: its ctrl against the same NumPy model (commands every tick and sparse ones),
  f = 0 bitwise its tick mode, the derivative (closed form and central differences), no
  Params / state leaf in tick mode, and a campaign `vary:` of the latency refused above
  `command_latency_max_s` (or unbounded) instead of clamped silently.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fibril_mjx
from fibril_mjx.builder import vary as fl
from fibril_mjx.components.actuators import motor as motor_mod
from fibril_mjx.components.actuators.scalar_actuator import ScalarCommand
from fibril_mjx.core import pipeline
from fibril_mjx.errors import ConfigError, ConfigErrors
from ref_helpers import write_manifest
from latency_rig import ARM_XML
from fibril_mjx.batch.simulation import Start

DT, T = 0.002, 60
LAT_MAX_S = 0.008   # 4 ticks


def write(tmp, motor: dict, encoder: dict | None = None):
  tmp.mkdir(parents=True, exist_ok=True)
  (tmp / 'arm.xml').write_text(ARM_XML)
  comps = [{'id': 'motor', 'type': 'fibril_sim/scalar_actuator',
            'config': {'actuator': 'motor', **motor}},
           {'id': 'encoder', 'type': 'fibril_sim/encoder',
            'config': {'joint': 'hinge', 'period_s': DT, **(encoder or {})}}]
  return write_manifest(tmp, ARM_XML, comps, model='arm.xml', name='m.yaml')


def commands(seed=0) -> np.ndarray:
  """Random torques (N·m), a new level every tick."""
  return np.random.default_rng(seed).uniform(-0.1, 0.1, T + 1).astype(np.float32)


def held_mean(u, latency_ticks: float, safe=0.0, n_out=None) -> np.ndarray:
  """NumPy: per tick j (of `n_out`, default one per command) the mean over [j, j + 1) of the
  held command, `u[m]` from `m + L` on (`safe` before the first arrival), by integration over
  the arrivals inside the tick."""
  u = np.asarray(u, np.float64)
  arrive = np.arange(len(u)) + latency_ticks
  out = np.zeros(len(u) if n_out is None else n_out)
  for j in range(len(out)):
    edges = np.concatenate([[j], arrive[(arrive > j) & (arrive < j + 1)], [j + 1]])
    for a, b in zip(edges[:-1], edges[1:]):
      got = np.flatnonzero(arrive <= a)
      out[j] += (b - a) * (u[got[-1]] if len(got) else safe)
  return out


def scalar_cmd(v):
  return ScalarCommand(v, jnp.bool_(True))


def effort_cmd(v):
  """A motor effort command, issued when `v` is finite (NaN: nothing issued this tick)."""
  return motor_mod.MotorCommand(jnp.where(jnp.isnan(v), motor_mod.NONE, motor_mod.EFFORT),
                                jnp.nan_to_num(v), jnp.bool_(False), jnp.float32(0.0))


def single_world(sim, field='latency_s', make=scalar_cmd):
  """`(latency_s, u (T+1,)) -> (ctrl (T+1,), qpos (T+1,))` of one world (pipeline init/step)
  of the component `motor`, its latency Params field `field`, commands `make(u[k])`."""
  built = sim.built
  base = sim.default_params()
  key = fibril_mjx.world_keys(0, 1)[0]
  adr = sim.components['motor'].binding.ctrladr

  def run(latency_s, u):
    params = dict(base)
    params['motor'] = base['motor']._replace(**{field: jnp.asarray(latency_s, jnp.float32)})
    cmd = lambda v: {'motor': make(v)}   # noqa: E731
    st = pipeline.init(built, params, key, commands=cmd(u[0]))

    def body(s, v):
      s, _ = pipeline.step(built, params, s, cmd(v))
      return s, (s.ctrl[adr], s.data.qpos[0])
    _, (ctrl, q) = jax.lax.scan(body, st, u[1:])
    return (jnp.concatenate([st.ctrl[adr][None], ctrl]),
            jnp.concatenate([st.data.qpos[0][None], q]))
  return run


@pytest.fixture(scope='module')
def arm(tmp_path_factory):
  tmp = tmp_path_factory.mktemp('arm')
  sim = fibril_mjx.load(write(tmp, {'latency_s': 0.0028, 'latency_mode': 'continuous',
                                    'latency_max_s': LAT_MAX_S}))
  run = single_world(sim)
  return sim, jax.jit(run), jax.jit(jax.vmap(run, in_axes=(0, None))), run


LATENCY_TICKS = (0.0, 0.3, 1.0, 1.4, 2.0, 2.75, 3.99)


def test_ctrl_is_the_time_average_of_the_held_command(arm):
  _, _, batch, _ = arm
  u = commands()
  lat = np.asarray(LATENCY_TICKS) * DT
  ctrl, _ = batch(jnp.asarray(lat, jnp.float32), jnp.asarray(u))
  for i, L in enumerate(LATENCY_TICKS):
    np.testing.assert_allclose(np.asarray(ctrl[i]), held_mean(u, L), atol=2e-5,
                               err_msg=f'latency {L} ticks')


def test_whole_ticks_equal_tick_mode_bitwise(arm, tmp_path):
  """f = 0: the continuous mode's ctrl is the tick mode's, to the bit (same latency, built
  separately in tick mode)."""
  _, single, _, _ = arm
  u = jnp.asarray(commands(1))
  for ticks in (0, 1, 3):
    tick_sim = fibril_mjx.load(write(tmp_path / f't{ticks}', {'latency_s': ticks * DT}))
    ref, q_ref = jax.jit(single_world(tick_sim))(0.0, u)   # its latency_s Param is unused
    got, q_got = single(jnp.float32(ticks * DT), u)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(ref))
    np.testing.assert_array_equal(np.asarray(q_got), np.asarray(q_ref))
    np.testing.assert_allclose(np.asarray(ref), held_mean(np.asarray(u), ticks), atol=1e-7)


def test_a_latency_above_latency_max_is_clamped(arm):
  _, single, _, _ = arm
  u = commands(2)
  got, _ = single(jnp.float32(LAT_MAX_S + 3 * DT), jnp.asarray(u))
  np.testing.assert_allclose(np.asarray(got), held_mean(u, LAT_MAX_S / DT), atol=2e-5)


def test_derivative_in_the_latency(arm):
  """d ctrl_j / dL = (u[j-n-1] - u[j-n]) / dt (closed form, inside a tick); a loss of the
  hinge angle: forward mode against central differences (float64 NumPy of float32 runs)."""
  _, single, _, _ = arm
  u = commands(3)
  for L in (0.4, 1.4, 2.6):
    n = math.floor(L)
    lat = jnp.float32(L * DT)
    (ctrl, q), (dctrl, dq) = jax.jvp(lambda x: single(x, jnp.asarray(u)), (lat,),
                                     (jnp.float32(1.0),))
    prev = np.concatenate([np.zeros(n + 1), u[:len(u) - n - 1]])
    cur = np.concatenate([np.zeros(n), u[:len(u) - n]])
    np.testing.assert_allclose(np.asarray(dctrl), (prev - cur) / DT, rtol=1e-4, atol=1e-3)
    loss = lambda qq: float(np.sum(np.asarray(qq, np.float64) ** 2))   # noqa: E731
    h = 0.1 * DT   # inside the tick interval: the loss is smooth there
    fd = (loss(single(jnp.float32(L * DT + h), jnp.asarray(u))[1])
          - loss(single(jnp.float32(L * DT - h), jnp.asarray(u))[1])) / (2 * h)
    an = float(2 * np.sum(np.asarray(q, np.float64) * np.asarray(dq, np.float64)))
    assert abs(an - fd) <= 2e-3 * abs(fd), (L, an, fd)


def test_vmap_over_latencies_equals_a_loop(arm):
  _, single, batch, _ = arm
  u = jnp.asarray(commands(4))
  lat = jnp.asarray(np.asarray(LATENCY_TICKS) * DT, jnp.float32)
  ctrl, q = batch(lat, u)
  for i in range(len(LATENCY_TICKS)):
    c1, q1 = single(lat[i], u)
    np.testing.assert_allclose(np.asarray(ctrl[i]), np.asarray(c1), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.asarray(q[i]), np.asarray(q1), rtol=1e-5, atol=1e-7)


def test_per_world_latency_through_the_simulation_api(arm):
  """`Simulation.rollout` with a per-world `latency_s` Param (as `vary:` and RL randomization
  give it): each world's applied value is its own mix."""
  sim = arm[0]
  W, lat = 3, np.array([0.5, 1.4, 2.2])
  p = sim.default_params(W)
  p['motor'] = p['motor']._replace(latency_s=jnp.asarray(lat * DT, jnp.float32))
  u = commands(5)[:T]   # entry k issued at tick k; tick T issues nothing
  cmds = {'motor': ScalarCommand(jnp.broadcast_to(jnp.asarray(u[:, None]), (T, W)),
                                 jnp.ones((T, W), bool))}
  _, tr, _ = sim.rollout(p, fibril_mjx.world_keys(0, W), T, commands=cmds)
  applied = np.asarray(tr['truth']['motor']['applied'])
  for w in range(W):
    np.testing.assert_allclose(applied[w], held_mean(u, lat[w], n_out=T + 1), atol=2e-5)


def test_sensor_sample_is_delivered_at_the_first_tick_at_or_after_its_arrival(tmp_path):
  """An encoder every 3 ticks, latency `L` ticks per world (the queue built at the largest):
  the sample of tick k arrives at `k + L` and is delivered at tick `ceil(k + L)` (NumPy),
  holding the angle of tick k."""
  lat = np.array([0.0, 0.5, 1.0, 1.75, 2.5])
  sim = fibril_mjx.load(write(tmp_path, {}, {'period_s': 3 * DT, 'latency_s': float(lat[-1] * DT)}))
  W = len(lat)
  _, tr, _ = sim.rollout(sim.default_params(W), fibril_mjx.world_keys(0, W), 30,
                         start=Start(latency={'encoder': {'latency_s': lat * DT}}))
  d = tr['sensor']['encoder']
  ticks, acq = np.arange(31), np.arange(0, 31, 3)
  for w, L in enumerate(lat):
    new = np.asarray(d.new_data)[w]
    arrival = np.ceil(acq + L - 1e-9).astype(int)
    arrival = arrival[arrival <= ticks[-1]]
    np.testing.assert_array_equal(ticks[new], arrival, err_msg=f'latency {L} ticks')
    np.testing.assert_array_equal(np.asarray(d.sample_tick)[w][new], acq[:len(arrival)])
    np.testing.assert_array_equal(np.asarray(d.sample.position)[w][new],
                                  np.asarray(tr['truth']['encoder']['position'])[w][
                                      acq[:len(arrival)]])


@pytest.mark.parametrize('motor, field, rule', [
    ({'latency_s': 0.003, 'latency_mode': 'continuous', 'application_period_s': 0.004},
     'application_period_s', 'latency_mode continuous needs the command applied every tick'),
    ({'latency_s': 0.004, 'latency_mode': 'continuous', 'delivery_quantization': 'strict'},
     'delivery_quantization', 'strict (whole ticks only) contradicts latency_mode: continuous'),
    ({'latency_s': 0.004, 'latency_mode': 'continuous', 'latency_max_s': 0.003},
     'latency_max_s', 'must be >= latency_s (0.004 s): it sizes the command queue'),
    ({'latency_s': 0.004, 'latency_max_s': 0.006},
     'latency_max_s', 'applies to latency_mode: continuous only'),
    ({'latency_mode': 'smooth'}, 'latency_mode', "'tick' or 'continuous'"),
])
def test_config_rules(tmp_path, motor, field, rule):
  with pytest.raises(ConfigErrors) as e:
    fibril_mjx.load(write(tmp_path, motor))
  text = str(e.value)
  assert f'components[0].config.{field}' in text and rule in text, text


# ------------------------------------------------------------------ fibril_sim/motor

def write_motor(tmp, motor: dict, type_='fibril_sim/motor'):
  """The arm with a `fibril_sim/motor` (effort input: ctrl = effort, gear 1) named `motor`."""
  tmp.mkdir(parents=True, exist_ok=True)
  (tmp / 'arm.xml').write_text(ARM_XML)
  comps = [{'id': 'motor', 'type': type_,
            'config': {'actuator': 'motor', 'application_period_s': DT, **motor}}]
  return write_manifest(tmp, ARM_XML, comps, model='arm.xml', name='m.yaml')


MOTOR_CONT = {'command_latency_s': 0.0028, 'command_latency_mode': 'continuous',
              'command_latency_max_s': LAT_MAX_S}


@pytest.fixture(scope='module')
def motor_arm(tmp_path_factory):
  sim = fibril_mjx.load(write_motor(tmp_path_factory.mktemp('motor'), MOTOR_CONT))
  run = single_world(sim, 'command_latency_s', effort_cmd)
  return sim, jax.jit(run), jax.jit(jax.vmap(run, in_axes=(0, None)))


def sparse(u, every=3):
  """`u` with a command every `every` ticks only (NaN: nothing issued)."""
  out = np.full_like(u, np.nan)
  out[::every] = u[::every]
  return out


def held_sparse(u, latency_ticks):
  """NumPy reference of sparse commands: the held command is the latest issued one."""
  k = np.flatnonzero(~np.isnan(u))
  arrive = k + latency_ticks
  ref = np.zeros(len(u))
  for j in range(len(u)):
    edges = np.concatenate([[j], arrive[(arrive > j) & (arrive < j + 1)], [j + 1]])
    for a, b in zip(edges[:-1], edges[1:]):
      got = np.flatnonzero(arrive <= a)
      ref[j] += (b - a) * (float(u[k[got[-1]]]) if len(got) else 0.0)
  return ref


def test_motor_ctrl_is_the_time_average_of_the_held_command(motor_arm):
  """Effort commands every tick and every third tick: each world's ctrl is the NumPy mean of
  the held command over the tick (safe effort 0 before the first arrival)."""
  _, _, batch = motor_arm
  lat = jnp.asarray(np.asarray(LATENCY_TICKS) * DT, jnp.float32)
  for u, ref in ((commands(6), held_mean), (sparse(commands(7)), held_sparse)):
    ctrl, _ = batch(lat, jnp.asarray(u))
    for i, L in enumerate(LATENCY_TICKS):
      np.testing.assert_allclose(np.asarray(ctrl[i]), ref(u, L), atol=2e-5,
                                 err_msg=f'latency {L} ticks')


def test_motor_whole_ticks_equal_tick_mode_bitwise(motor_arm, tmp_path):
  _, single, _ = motor_arm
  u = jnp.asarray(sparse(commands(8), 2))
  for ticks in (0, 1, 3):
    tick_sim = fibril_mjx.load(write_motor(tmp_path / f't{ticks}',
                                           {'command_latency_s': ticks * DT}))
    ref, q_ref = jax.jit(single_world(tick_sim, 'safe_command', effort_cmd))(0.0, u)
    got, q_got = single(jnp.float32(ticks * DT), u)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(ref))
    np.testing.assert_array_equal(np.asarray(q_got), np.asarray(q_ref))


def test_motor_tick_mode_adds_no_leaf(tmp_path):
  """Tick mode: no latency Params leaf and no settled ctrl in the command link's state."""
  sim = fibril_mjx.load(write_motor(tmp_path, {'command_latency_s': 0.004}))
  p = sim.default_params()['motor']
  assert p.command_latency_s is None
  assert sim.components['motor'].param_path('command_latency_s') is None
  st = sim.reset(sim.default_params(1), fibril_mjx.world_keys(0, 1))
  assert st.components['motor'].link.settled is None


def test_motor_derivative_in_the_latency(motor_arm):
  """d ctrl_j / dL = (u[j-n-1] - u[j-n]) / dt inside a tick; the hinge-angle loss's
  forward-mode derivative against central differences."""
  _, single, _ = motor_arm
  u = commands(9)
  for L in (0.4, 2.6):
    n = math.floor(L)
    (ctrl, q), (dctrl, dq) = jax.jvp(lambda x: single(x, jnp.asarray(u)),
                                     (jnp.float32(L * DT),), (jnp.float32(1.0),))
    prev = np.concatenate([np.zeros(n + 1), u[:len(u) - n - 1]])
    cur = np.concatenate([np.zeros(n), u[:len(u) - n]])
    np.testing.assert_allclose(np.asarray(dctrl), (prev - cur) / DT, rtol=1e-4, atol=1e-3)
    loss = lambda qq: float(np.sum(np.asarray(qq, np.float64) ** 2))   # noqa: E731
    h = 0.1 * DT
    fd = (loss(single(jnp.float32(L * DT + h), jnp.asarray(u))[1])
          - loss(single(jnp.float32(L * DT - h), jnp.asarray(u))[1])) / (2 * h)
    an = float(2 * np.sum(np.asarray(q, np.float64) * np.asarray(dq, np.float64)))
    assert abs(an - fd) <= 2e-3 * abs(fd), (L, an, fd)


@pytest.mark.parametrize('motor, field, rule', [
    ({'command_latency_mode': 'continuous', 'application_period_s': 0.004},
     'application_period_s', 'command_latency_mode continuous needs the command applied every '
     'tick (application_period_s = dt = 0.002 s'),
    ({'command_latency_mode': 'continuous', 'application_phase_s': 0.002},
     'application_period_s', 'command_latency_mode continuous needs the command applied every '
     'tick'),
    ({'command_latency_mode': 'continuous', 'command_jitter_s': 0.001},
     'command_jitter_s', 'command jitter contradicts command_latency_mode: continuous'),
    ({'command_latency_s': 0.004, 'command_latency_mode': 'continuous',
      'command_latency_max_s': 0.003},
     'command_latency_max_s', 'must be >= command_latency_s (0.004 s): it sizes the command '
     'queue'),
    ({'command_latency_s': 0.004, 'command_latency_max_s': 0.006},
     'command_latency_max_s', 'applies to command_latency_mode: continuous only'),
])
def test_motor_config_rules(tmp_path, motor, field, rule):
  with pytest.raises(ConfigErrors) as e:
    fibril_mjx.load(write_motor(tmp_path, motor))
  text = str(e.value)
  assert f'components[0].config.{field}' in text and rule in text, text


def test_continuous_latency_refused_by_law_types(tmp_path):
  """`fibril_sim/position_servo` (like `motion_motor`) evaluates its law from the joint state
  every tick: no continuous mode."""
  with pytest.raises(ConfigErrors) as e:
    fibril_mjx.load(write_motor(tmp_path, {'command_latency_mode': 'continuous'},
                                'fibril_sim/position_servo'))
  text = str(e.value)
  assert 'components[0].config.command_latency_mode' in text, text
  assert 'supported by fibril_sim/motor and fibril_sim/scalar_actuator only' in text, text


@pytest.mark.parametrize('dist, rule', [
    ({'dist': 'uniform', 'low': (0.0,), 'high': (0.012,)},
     'draws up to 0.012 s, above motor.command_latency_max_s = 0.008 s (it sizes the command '
     'queue; a larger latency would be clamped): set command_latency_max_s >= 0.012'),
    ({'dist': 'choice', 'values': (0.002, 0.01)},
     'draws up to 0.01 s, above motor.command_latency_max_s = 0.008 s'),
    ({'dist': 'normal', 'mean': (0.004,), 'std': (0.001,)},
     'a continuous latency sizes the command queue by its largest value: use a bounded '
     'distribution'),
])
def test_campaign_vary_refuses_a_latency_above_its_max(motor_arm, dist, rule):
  """A campaign (`vary.resolve`) refuses what would be clamped; RL randomization
  (`sizes_latency`) takes a bounded one and sizes the queue itself."""
  sim = motor_arm[0]
  d = fl.Distribution('motor.command_latency_s', dist.pop('dist'), dist)
  with pytest.raises(ConfigError) as e:
    fl.resolve(sim, [d], 'c.yaml')
  assert e.value.path.startswith('vary.motor.command_latency_s') and rule in str(e.value), \
      str(e.value)
  if d.dist != 'normal':
    (f,) = fl.resolve(sim, [d], 'c.yaml', sizes_latency=True)
    assert f.kind == 'param'
  ok = fl.Distribution('motor.command_latency_s', 'uniform', {'low': (0.0,), 'high': (0.008,)})
  assert fl.resolve(sim, [ok], 'c.yaml')[0].kind == 'param'
