"""Actuator command paths (SPEC §6) against independent NumPy references.

One module-scoped simulation of the actuator rig (tests/actuator_rig.py) carries every path at
once, so MJX compiles once: a scalar actuator, a motor on a position servo (slew-limited
position, velocity-on-position integration, duty, zero-duty hold, encoder reset, trapezoidal
trajectory), a motor on a velocity servo (limits, duty, rejected kinds, timeout → safe
command), a motor on a torque actuator behind a pulley assembly (power-conjugate effort,
feedback current per motor), a motion_motor behind a gear_rotary assembly and a motor on a
dcmotor velocity input. A scripted command trace drives them open loop; each reference below
is written from the rules of SPEC §6, in float64, and reads the joint state from the recorded
truth where the rule depends on it (hold capture, encoder reset, the impedance law).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fibril_mjx
from fibril_mjx.components.actuators import motion_motor as mmo
from fibril_mjx.components.actuators import motor as mo
from actuator_rig import motion, motor, scalar, write
from fibril_mjx.batch.simulation import Controller

T = 400          # ticks
W = 2            # worlds (identical commands)

SC = dict(latency_s=0.006, application_period_s=0.004, application_phase_s=0.002,
          timeout_s=0.03, safe_value=0.33, deadband=0.12, resolution=0.1,
          saturation_min=-0.55, saturation_max=0.77)
MP = dict(logical_units_per_joint_unit=2.0, command_latency_s=0.004, application_period_s=0.004,
          command_velocity_limit=4.0, trajectory_acceleration_limit=60.0,
          duty_velocity_scale=1.5, zero_duty_hold=True)
MV = dict(command_latency_s=0.002, command_velocity_limit=2.0, duty_velocity_scale=3.0,
          timeout_s=0.02, safe_command=0.25)
ME = dict(feedback_current_per_force=4.0, duty_effort_scale=2.0, timeout_s=0.01,
          safe_command=0.1)
MM = dict(timeout_s=0.01, feedback_current_per_force=0.5)
ASSEMBLIES = [
    {'id': 'eff_axis', 'component': 'me', 'actuator_count': 2,
     'transmission': {'type': 'pulley', 'radius': 0.5, 'ratio': 3.0}},
    {'id': 'mm_axis', 'component': 'mm', 'transmission': {'type': 'gear_rotary', 'ratio': 2.5}},
]
ME_S, ME_GEAR, MM_GEAR = 0.5, 3.0, 2.5


# ------------------------------------------------------------------------------ commands


def _scalar_commands():
  rng = np.random.default_rng(1)
  issued = np.zeros(T, bool)
  value = np.zeros(T, np.float32)
  issued[:100] = rng.random(100) < 0.5
  issued[140:200] = rng.random(60) < 0.3
  value[:] = rng.uniform(-1.2, 1.2, T)
  # order-sensitive values: deadband before resolution (0.125 → 0, not 0.1), resolution before
  # saturation (0.9 → 0.9 → 0.77, not 0.77 → 0.8), a non-finite command (rejected)
  for k, v in ((4, 0.125), (10, 0.9), (16, -0.62), (30, 0.125), (50, np.nan)):
    issued[k], value[k] = True, v
  return issued, value


def _motor_trace(events):
  kind = np.zeros(T, np.int32)
  value = np.zeros(T, np.float32)
  reset = np.zeros(T, bool)
  reset_pos = np.zeros(T, np.float32)
  for k, (name, v) in events.items():
    if name == 'reset':
      reset[k], reset_pos[k] = True, v
    else:
      kind[k], value[k] = mo.KINDS.index(name), v
  return kind, value, reset, reset_pos


MP_EVENTS = {0: ('position', 0.4), 60: ('velocity', -1.0), 100: ('duty', 0.5),
             130: ('duty', 0.0), 131: ('duty', 0.0), 140: ('effort', 1.0),
             160: ('reset', 1.0), 170: ('trajectory', 2.0)}
MV_EVENTS = {0: ('velocity', 1.0), 30: ('velocity', 3.0), 50: ('duty', -0.5),
             70: ('duty', 2.0), 80: ('effort', 1.0), 90: ('velocity', np.nan),
             150: ('velocity', -0.7)}
DC_EVENTS = {0: ('velocity', 5.0), 100: ('velocity', -3.0)}


def _effort_events():
  rng = np.random.default_rng(2)
  ev = {k: ('effort', float(rng.uniform(-2, 2))) for k in range(100)}
  ev.update({k: ('duty', float(rng.uniform(-1.5, 1.5))) for k in range(100, 120)})
  return ev


def _motion_commands():
  rng = np.random.default_rng(3)
  c = {'issued': np.zeros(T, bool), 'enable': np.ones(T, bool),
       'position': rng.uniform(-0.5, 0.5, T), 'velocity': rng.uniform(-1, 1, T),
       'kp': rng.uniform(0, 40, T), 'kd': rng.uniform(0, 1.5, T),
       'effort_ff': rng.uniform(-1, 1, T)}
  c['issued'][:150] = True
  c['kp'][20] = -1.0
  c['kd'][40] = np.nan
  c['position'][60] = np.inf
  c['enable'][80:90] = False
  return {k: v.astype(np.float32) if v.dtype == np.float64 else v for k, v in c.items()}


def _batch(x):
  return jnp.asarray(np.broadcast_to(np.asarray(x)[:, None], (T, W) + np.shape(x)[1:]))


def command_trace():
  sc_issued, sc_value = _scalar_commands()
  out = {'sc': (sc_value, sc_issued)}
  for cid, events in (('mp', MP_EVENTS), ('mv', MV_EVENTS), ('me', _effort_events()),
                      ('dc', DC_EVENTS)):
    out[cid] = _motor_trace(events)
  mm = _motion_commands()
  out['mm'] = tuple(mm[f] for f in mmo.MotionCommand._fields)
  types = {'sc': lambda a: a, 'mp': mo.MotorCommand, 'mv': mo.MotorCommand,
           'me': mo.MotorCommand, 'dc': mo.MotorCommand, 'mm': mmo.MotionCommand}
  from fibril_mjx.components.actuators.scalar_actuator import ScalarCommand
  trace = {}
  for cid, arrays in out.items():
    cls = ScalarCommand if cid == 'sc' else types[cid]
    trace[cid] = cls(*(_batch(a) for a in arrays))
  return out, trace


@pytest.fixture(scope='module')
def sim(tmp_path_factory):
  comps = [scalar('sc', 'a_sc', **SC), motor('mp', 'a_pos', **MP), motor('mv', 'a_vel', **MV),
           motor('me', 'a_eff', **ME), motion('mm', **MM), motor('dc', 'a_dc')]
  return fibril_mjx.load(write(tmp_path_factory.mktemp('paths'), comps,
                               extra={'assemblies': ASSEMBLIES}))


@pytest.fixture(scope='module')
def run(sim):
  raw, trace = command_trace()
  keys = fibril_mjx.world_keys(0, W)
  final, tr, _ = sim.rollout(sim.default_params(W), keys, T, commands=trace)
  return raw, jax.tree.map(np.asarray, tr), final


# ------------------------------------------------------------------------------ scalar


def scalar_reference(issued, value):
  """timeout → deadband → resolution → saturation at instants (phase 1 tick, period 2)."""
  lat, timeout_ticks = 3, 15
  held, last_rel, pending = None, None, []
  applied = np.empty(T + 1)

  def process(v):
    if abs(v) < SC['deadband']:
      v = 0.0
    v = SC['resolution'] * np.round(v / SC['resolution'])
    return min(max(v, SC['saturation_min']), SC['saturation_max'])
  cur = process(SC['safe_value'])
  rejected = 0
  for k in range(T + 1):              # tick T: nothing issued
    if k < T and issued[k]:
      pending.append((k + lat, float(value[k])))
    for r, v in [p for p in pending if p[0] <= k]:
      pending.remove((r, v))
      if math.isfinite(v):
        held, last_rel = v, k
      else:
        rejected += 1
    if k >= 1 and (k - 1) % 2 == 0:
      fresh = held is not None and k - last_rel <= timeout_ticks
      cur = process(held if fresh else SC['safe_value'])
    applied[k] = cur
  return applied, rejected


def test_scalar_path_matches_reference(run, sim):
  raw, tr, final = run
  ref, rejected = scalar_reference(*reversed(raw['sc']))
  got = tr['truth']['sc']['applied']
  np.testing.assert_allclose(got[:, 0], 0.3, atol=1e-6)   # tick 0: the processed safe value
  np.testing.assert_allclose(got, np.broadcast_to(ref, (W, T + 1)), atol=1e-6)
  # the order is observable: 0.125 → 0 (deadband first), 0.9 → 0.77 (saturation last)
  assert 0.77 in np.round(ref, 6) and -0.55 in np.round(ref, 6)
  assert np.any(tr['truth']['sc']['timed_out'][0])
  st = sim.components['sc'].status(jax.tree.map(lambda x: x[0], final.components['sc']))
  assert int(st['command_rejected']) == rejected == 1
  b = sim.components['sc'].binding
  assert b.ctrladr != b.id   # the spare dcmotor owns three controls before it
  np.testing.assert_allclose(np.asarray(final.ctrl)[:, b.ctrladr], ref[-1], atol=1e-6)


# ------------------------------------------------------------------------------ motor, position input


def rest_to_rest(dist, vmax, amax, t):
  """Analytic trapezoid (or triangle) from rest over `dist >= 0`, distance at time t."""
  if dist * amax >= vmax * vmax:
    ta, tc = vmax / amax, (dist - vmax * vmax / amax) / vmax
    total = 2 * ta + tc
    if t < ta:
      return amax * t * t / 2
    if t < ta + tc:
      return vmax * vmax / (2 * amax) + vmax * (t - ta)
    return dist - amax * max(total - t, 0.0) ** 2 / 2
  ta = math.sqrt(dist / amax)
  if t < ta:
    return amax * t * t / 2
  return dist - amax * max(2 * ta - t, 0.0) ** 2 / 2


def position_reference(events, q):
  """Joint setpoint and encoder zero per tick for the position-input motor `mp`."""
  s, lat, period_ticks = MP['logical_units_per_joint_unit'], 2, 2
  dtapp = MP['application_period_s']
  vmax, amax = MP['command_velocity_limit'] / s, MP['trajectory_acceleration_limit'] / s
  zero, held, mode = 0.0, None, None
  sp, hold, traj = q[0], None, None
  sps, zeros = np.empty(T + 1), np.empty(T + 1)
  for k in range(T + 1):
    ev = events.get(k - lat)
    if ev is not None:
      name, v = ev
      if name == 'reset':
        zero = q[k] - v / s
      elif name in ('position', 'trajectory'):
        held = (name, v / s + zero)
      elif name == 'velocity':
        held = ('velocity', v / s)
      elif name == 'duty':
        held = ('duty', v)
      # 'effort' is not accepted by a position input: rejected, held unchanged
    if k % period_ticks == 0:
      name, v = held if held is not None else ('position', 0.0 / s + zero)
      if name == 'duty':
        name, v = ('hold', None) if v == 0 else ('velocity', v * MP['duty_velocity_scale'] / s)
      if name == 'position':
        sp += np.clip(v - sp, -vmax * dtapp, vmax * dtapp)
      elif name == 'velocity':
        sp += np.clip(v, -vmax, vmax) * dtapp
      elif name == 'hold':
        if mode != 'hold':
          hold = q[k]
        sp = hold
      elif name == 'trajectory':
        if mode != 'trajectory':
          traj = (sp, v, k)
        p0, target, k0 = traj
        t = ((k - k0) // period_ticks + 1) * dtapp
        sp = p0 + np.sign(target - p0) * rest_to_rest(abs(target - p0), vmax, amax, t)
      mode = name
    sps[k], zeros[k] = sp, zero
  return sps, zeros


def test_position_input_paths_match_reference(run, sim):
  """Slewed position, velocity integration, duty, zero-duty hold (no re-capture on a repeated
  duty 0), a rejected effort command, encoder reset, then a rest-to-rest trapezoid."""
  raw, tr, final = run
  t = tr['truth']['mp']
  q = t['joint_position'][0].astype(np.float64)
  sp, zero = position_reference(MP_EVENTS, q)
  s = MP['logical_units_per_joint_unit']
  np.testing.assert_allclose(t['setpoint'], np.broadcast_to((sp - zero) * s, (W, T + 1)),
                             atol=2e-5)
  # feedback position is logical with the reset zero: (q - zero)·s, both of the tick it was
  # acquired at
  fb = tr['sensor']['mp']
  new = fb.new_data[0]
  st = fb.sample_tick[0][new]
  assert new.sum() == T // 2 + 1                    # feedback every application period
  np.testing.assert_allclose(fb.sample.position[0][new], (q[st] - zero[st]) * s, atol=2e-5)
  # the reset (released at tick 162) makes the joint position of that tick read 1.0
  assert abs(t['position'][0, 162] - 1.0) < 2e-5
  st = sim.components['mp'].status(jax.tree.map(lambda x: x[0], final.components['mp']))
  assert int(st['command_rejected']) == 1               # the effort command
  # the trapezoid reaches the target (logical 2.0 after the reset) and stops there
  np.testing.assert_allclose(t['setpoint'][0, -50:], 2.0, atol=2e-5)
  # ctrl is gear · joint setpoint, in the actuator's own control slot
  b = sim.components['mp'].binding
  np.testing.assert_allclose(np.asarray(final.ctrl)[:, b.ctrladr], b.gear * sp[-1], atol=2e-5)


def test_trapezoid_respects_limits_when_retargeted():
  """Re-planning mid-move (new target, non-zero velocity) keeps |v| ≤ V, |Δv| ≤ A·Δ, ends at
  rest on the target; the sampled profile is exactly the analytic one from rest."""
  vmax, amax, dt = 2.0, 30.0, 0.004
  plan = mo.trapezoid_plan(jnp.float32(0.0), jnp.float32(0.0), jnp.float32(0.5), vmax, amax, 0)
  ts = np.arange(1, 120) * dt
  pos, vel = jax.vmap(lambda t: mo.trapezoid_sample(plan, t, amax))(jnp.asarray(ts))
  ref = np.array([rest_to_rest(0.5, vmax, amax, t) for t in ts])
  np.testing.assert_allclose(pos, ref, atol=2e-6)
  # retarget at step 20 (moving at +v) to a point behind: must brake, reverse, stop exactly
  p, v = float(pos[19]), float(vel[19])
  plan2 = mo.trapezoid_plan(jnp.float32(p), jnp.float32(v), jnp.float32(-0.2), vmax, amax, 0)
  ps, vs = jax.vmap(lambda t: mo.trapezoid_sample(plan2, t, amax))(jnp.asarray(ts))
  vs = np.concatenate([[v], np.asarray(vs)])
  assert np.all(np.abs(vs) <= vmax + 1e-5)
  assert np.all(np.abs(np.diff(vs)) <= amax * dt + 1e-4)
  np.testing.assert_allclose(ps[-10:], -0.2, atol=1e-5)
  np.testing.assert_allclose(vs[-10:], 0.0, atol=1e-6)


# ------------------------------------------------------------------------------ velocity input


def test_velocity_input_limits_duty_rejection_and_timeout(run, sim):
  raw, tr, final = run
  lat, timeout_ticks = 1, 10
  held, last_rel, ref, stale = None, None, np.empty(T + 1), np.zeros(T + 1, bool)
  for k in range(T + 1):
    ev = MV_EVENTS.get(k - lat)
    if ev is not None and ev[0] in ('velocity', 'duty') and math.isfinite(ev[1]):
      held, last_rel = ev, k
    stale[k] = held is not None and k - last_rel > timeout_ticks
    if held is None or stale[k]:
      v = MV['safe_command']
    elif held[0] == 'duty':
      v = np.clip(held[1], -1, 1) * MV['duty_velocity_scale']
    else:
      v = held[1]
    ref[k] = np.clip(v, -MV['command_velocity_limit'], MV['command_velocity_limit'])
  np.testing.assert_allclose(tr['truth']['mv']['setpoint'], np.broadcast_to(ref, (W, T + 1)),
                             atol=1e-6)
  st = sim.components['mv'].status(jax.tree.map(lambda x: x[0], final.components['mv']))
  assert int(st['command_rejected']) == 2          # effort kind, NaN velocity
  np.testing.assert_array_equal(tr['truth']['mv']['timed_out'][0], stale)
  assert int(st['timeout_instants']) == stale.sum()
  assert stale[82:151].all() and not stale[151:162].any()   # rejected commands do not feed
                                                            # the watchdog


# ------------------------------------------------------------------------------ torque input


def test_effort_is_power_conjugate_and_current_is_per_motor(run, sim):
  raw, tr, final = run
  comp = sim.components['me']
  assert comp.binding.gear == ME_GEAR                        # written by the pulley assembly
  assert sim.mj_model.actuator('a_eff').gear[0] == ME_GEAR
  assert comp.cfg.logical_units_per_joint_unit == ME_S        # radius
  ev = _effort_events()
  ref = np.empty(T + 1)
  for k in range(T + 1):
    if k in ev:
      name, v = ev[k]
      ref[k] = v if name == 'effort' else np.clip(v, -1, 1) * ME['duty_effort_scale']
    elif k > 119 + 5:
      ref[k] = ME['safe_command']
    else:
      ref[k] = ref[k - 1]
  t = tr['truth']['me']
  # qfrc_actuator of tick k (MuJoCo's at x_k with the tick's ctrl) in logical units: exactly
  # the command
  np.testing.assert_allclose(t['applied_effort'], np.broadcast_to(ref, (W, T + 1)), atol=2e-5)
  fb = tr['sensor']['me'].sample
  np.testing.assert_allclose(fb.applied_effort[0], ref, atol=2e-5)
  # joint effort = logical effort · s, so logical power = joint power
  q_dot = tr['truth']['me']['velocity'][0] / ME_S
  joint_effort = ref * ME_S
  np.testing.assert_allclose(fb.applied_effort[0] * fb.velocity[0], joint_effort * q_dot,
                             atol=1e-5)
  # per-motor current from the motor-side force (before the assembly gear), 2 motors
  force = ref * ME_S / ME_GEAR
  np.testing.assert_allclose(fb.current[0], ME['feedback_current_per_force'] * force / 2,
                             atol=2e-5)


# ------------------------------------------------------------------------------ motion_motor


def test_motion_motor_qfrc_is_the_impedance_law(run, sim):
  raw, tr, final = run
  comp = sim.components['mm']
  assert comp.gear == MM_GEAR
  for name in ('mm_p', 'mm_v', 'mm_f'):
    assert sim.mj_model.actuator(name).gear[0] == MM_GEAR
  c = _motion_commands()
  t = tr['truth']['mm']
  q, qd = t['position'][0].astype(np.float64), t['velocity'][0].astype(np.float64)
  held, last, ref = None, None, np.empty(T + 1)
  for k in range(T + 1):
    if k < T and c['issued'][k]:
      vals = [c[f][k] for f in ('position', 'velocity', 'kp', 'kd', 'effort_ff')]
      if np.all(np.isfinite(vals)) and c['kp'][k] >= 0 and c['kd'][k] >= 0:
        held, last = dict(zip(('p', 'v', 'kp', 'kd', 'ff'), vals), enable=c['enable'][k]), k
    active = held is not None and held['enable'] and k - last <= 5
    f = 0.0
    if active:
      f = held['kp'] * (held['p'] - q[k]) + held['kd'] * (held['v'] - qd[k]) + held['ff']
    ref[k] = np.clip(f, -3.0, 3.0)
  np.testing.assert_allclose(t['applied_effort'], np.broadcast_to(ref, (W, T + 1)), atol=1e-4)
  assert np.any(np.abs(ref) == 3.0)                           # actuatorfrcrange clamps the sum
  fb = tr['sensor']['mm'].sample
  np.testing.assert_allclose(fb.applied_effort[0], ref, atol=1e-4)
  np.testing.assert_allclose(fb.current[0], MM['feedback_current_per_force'] * ref / MM_GEAR,
                             atol=1e-4)
  st = comp.status(jax.tree.map(lambda x: x[0], final.components['mm']))
  assert int(st['command_rejected']) == 3


# ------------------------------------------------------------------------------ dcmotor input


def test_dcmotor_velocity_input_and_effort_from_actuator_force(run, sim):
  raw, tr, final = run
  comp = sim.components['dc']
  b = comp.binding
  assert (b.kind, b.dc_input, b.semantic) == ('dcmotor', 'vel', 'velocity')
  assert sim.dcmotor is not None and b.id in sim.dcmotor.actuator_id
  np.testing.assert_allclose(np.asarray(final.ctrl)[:, b.ctrladr], -3.0 * b.gear, atol=1e-6)
  fb = tr['sensor']['dc'].sample
  # applied effort is the dcmotor force (× gear / s), not ctrl (a velocity setpoint)
  np.testing.assert_allclose(fb.applied_effort[0, 1:], tr['truth']['dc']['applied_effort'][0, 1:],
                             atol=1e-5)
  assert np.max(np.abs(fb.applied_effort[0, 50:100] - 5.0)) > 1.0
  # the MJCF dcmotor's speed loop drives the joint towards each commanded speed
  v = tr['truth']['dc']['velocity'][0]
  assert 1.0 < v[100] < 5.0 and v[-1] < v[100] - 1.0


# ------------------------------------------------------------------------------ controller, randomness


VEL_XML = """<mujoco model="vel_rig"><option timestep="0.002"/>
  <worldbody><body><joint name="j" type="hinge" axis="0 0 1" damping="0.05"/>
    <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="0.5" contype="0"
          conaffinity="0"/></body></worldbody>
  <actuator><velocity name="v" joint="j" kv="3"/></actuator></mujoco>"""


@pytest.fixture(scope='module')
def vel_sim(tmp_path_factory):
  comp = motor('v', 'v', command_latency_s=0.004, command_jitter_s=0.003,
               command_loss_probability=0.2, feedback_period_s=0.004, feedback_latency_s=0.004,
               logical_units_per_joint_unit=0.5)
  return fibril_mjx.load(write(tmp_path_factory.mktemp('vel'), [comp], xml=VEL_XML))


def hold_at_one(obs, carry):
  """Closed loop on delivered feedback only: logical position → 1.0."""
  assert set(obs) == {'sensor'}
  fb = obs['sensor']['v']
  v = jnp.where(fb.valid, 4.0 * (1.0 - fb.sample.position), 0.0)
  return {'v': mo.command('velocity', v)}, carry + 1


def test_closed_loop_controller_on_delivered_feedback(vel_sim):
  keys = fibril_mjx.world_keys(0, 4)
  final, tr, _ = vel_sim.rollout(vel_sim.default_params(4), keys, 600,
                                 controller=Controller(hold_at_one, init=jnp.int32(0)))
  pos = np.asarray(tr['truth']['v']['position'])
  np.testing.assert_allclose(pos[:, -1], 1.0, atol=0.02)
  st = vel_sim.components['v'].status(final.components['v'])
  lost = np.asarray(st['command_lost'])
  assert np.all(lost > 60) and np.all(lost < 180)      # 20 % of 600 commands, per world
  assert len(set(lost.tolist())) > 1                    # independent streams per world
  new = np.asarray(tr['sensor']['v'].new_data)
  seq = np.asarray(tr['sensor']['v'].sequence)
  for w in range(4):
    assert np.all(np.diff(seq[w][new[w]]) > 0)


def test_world_alone_equals_world_in_batch_with_jitter_and_loss(vel_sim):
  keys = fibril_mjx.world_keys(0, 4)
  _, batch, _ = vel_sim.rollout(vel_sim.default_params(4), keys, 600,
                                controller=Controller(hold_at_one, init=jnp.int32(0)))
  _, alone, _ = vel_sim.rollout(vel_sim.default_params(1), fibril_mjx.world_keys(0, 1, 2), 600,
                                controller=Controller(hold_at_one, init=jnp.int32(0)))
  for a, b in zip(jax.tree.leaves(alone), jax.tree.leaves(batch)):
    np.testing.assert_array_equal(np.asarray(a)[0], np.asarray(b)[2])


# ---------------------------------------------- law between packets; motor hold, slew, timeout


HOLD_XML = """<mujoco model="hold_rig">
  <compiler angle="radian"/>
  <option timestep="0.002" integrator="implicitfast"/>
  <include file="package://fibril_sim_models/mujoco/actuator_presets.xml"/>
  <default><geom contype="0" conaffinity="0"/><joint damping="0.05"/></default>
  <worldbody>
    <body name="b_h"><joint name="j_h" type="hinge" axis="0 1 0" ref="0.4"/>
      <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="0.5"/></body>
    <body name="b_t" pos="1 0 0"><joint name="j_t" type="hinge" axis="0 0 1"/>
      <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="0.5"/></body>
    <body name="b_o" pos="2 0 0"><joint name="j_o" type="hinge" axis="0 0 1"/>
      <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="0.5"/></body>
    <body name="b_mm" pos="3 0 0"><joint name="j_mm" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0.25 0 0" size="0.02" mass="1"/></body>
  </worldbody>
  <actuator>
    <position name="p_h" joint="j_h" kp="30" kv="2"/>
    <position name="p_t" joint="j_t" kp="30" kv="2"/>
    <position name="p_o" joint="j_o" kp="30" kv="2" forcerange="-2 3"/>
    <position name="mm_p" class="fibril_sim_hw_robstride_operation_position" joint="j_mm"/>
    <velocity name="mm_v" class="fibril_sim_hw_robstride_operation_velocity" joint="j_mm"/>
    <motor name="mm_f" class="fibril_sim_hw_robstride_operation_feedforward" joint="j_mm"/>
  </actuator>
</mujoco>"""

T2 = 150
HOLD_SAFE = 0.1                        # safe command of the hold motor (never applied)
TRAJ = dict(command_velocity_limit=3.0, application_period_s=0.004)
TO = dict(timeout_s=0.02, safe_command=0.3, logical_units_per_joint_unit=-2.0)
TO_LAST = 49                           # last issued position command of `to`
MM2 = dict(application_period_s=0.01, command_latency_s=0.002)   # packets every 5 ticks
KICK = 37                              # between the packets latched at ticks 35 and 40
KICK_DQ, KICK_DQD = 0.05, -3.0


@pytest.fixture(scope='module')
def hold_sim(tmp_path_factory):
  comps = [motor('hold', 'p_h', hold_when_uncommanded=True, safe_command=HOLD_SAFE),
           motor('traj', 'p_t', **TRAJ), motor('to', 'p_o', **TO),
           {'id': 'mm', 'type': 'fibril_sim/motion_motor',
            'config': {'joint': 'j_mm', 'position_actuator': 'mm_p',
                       'velocity_actuator': 'mm_v', 'feedforward_actuator': 'mm_f',
                       'profiles': {'device': 'robstride_rs00'},
                       **MM2}},
           ]
  return fibril_mjx.load(write(tmp_path_factory.mktemp('hold'), comps, xml=HOLD_XML))


def _hold_commands():
  """Per tick: the motors' (kind, value) and the motion command fields (one world)."""
  rng = np.random.default_rng(7)
  hold = [('none', 0.0)] * T2
  hold[80] = ('position', 0.1)
  traj = [('none', 0.0)] * T2
  traj[0], traj[110] = ('trajectory', 0.5), ('trajectory', -0.2)
  to = [('position', float(v)) for v in rng.uniform(-0.4, 0.4, TO_LAST + 1)]
  to += [('none', 0.0)] * (T2 - len(to))
  mm = {'position': rng.uniform(-0.3, 0.3, T2), 'velocity': rng.uniform(-1, 1, T2),
        'kp': rng.uniform(5, 40, T2), 'kd': rng.uniform(0.2, 1.0, T2),
        'effort_ff': rng.uniform(-0.5, 0.5, T2)}
  return hold, traj, to, {k: v.astype(np.float32).astype(np.float64) for k, v in mm.items()}


@pytest.fixture(scope='module')
def hold_run(hold_sim):
  """Steps tick by tick so that the motion motor's joint can be kicked between packets.

  Tick k's commands (`_hold_commands()[.][k]`) are issued at tick k: `reset` takes tick 0's,
  the step to tick k takes tick k's (tick T2 issues nothing). `rows` holds each tick's joint
  state `x_k`, `tr` its outputs, ticks 0 … T2."""
  sim = hold_sim
  hold, traj, to, mm = _hold_commands()
  keys = fibril_mjx.world_keys(0, W)
  p = sim.default_params(W)
  b = sim.components['mm'].channels[0]
  full = lambda x: jnp.full((W,), x)  # noqa: E731

  def commands(k):
    if k >= T2:
      return None
    cmds = {cid: mo.command(*seq[k]) for cid, seq in (('hold', hold), ('traj', traj),
                                                      ('to', to))}
    cmds = jax.tree.map(full, cmds)
    cmds['mm'] = mmo.command(*(full(mm[f][k]) for f in ('position', 'velocity', 'kp', 'kd',
                                                          'effort_ff')))
    return cmds
  st = sim.reset(p, keys, commands=commands(0))
  rows = {'q': [], 'qd': []}
  outs = []
  for k in range(T2 + 1):
    if k == KICK:   # the integration from x_{k-1} to x_k starts from a kicked state
      d = st.data
      st = st._replace(data=d.replace(qpos=d.qpos.at[:, b.qposadr].add(KICK_DQ),
                                      qvel=d.qvel.at[:, b.dofadr].add(KICK_DQD)))
    if k:
      st, out = sim.step(p, st, commands(k))
    else:
      out = sim.outputs(st)
    rows['q'].append(np.asarray(st.data.qpos[0, b.qposadr], np.float64))
    rows['qd'].append(np.asarray(st.data.qvel[0, b.dofadr], np.float64))
    outs.append(out)
  tr = jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs], axis=1), *outs)
  return {k: np.array(v) for k, v in rows.items()}, tr, st


def test_motion_motor_law_holds_every_tick_between_packets(hold_sim, hold_run):
  """Packets every 5 ticks (1 tick latency), the joint kicked (q and q̇) at a tick between two
  packets: the restoring torque at every tick is kp(p* − q) + kd(v* − q̇) + ff of the latest
  latched packet and the CURRENT state — not the unit channels' own stiffness (gear² · 1) and
  damping around setpoints held from the packet instant, as before issue 13."""
  rows, tr, _ = hold_run
  comp = hold_sim.components['mm']
  _, _, _, mm = _hold_commands()
  q, qd = rows['q'], rows['qd']
  g = comp.gear
  ref, old = np.empty(T2), np.empty(T2)
  latched, at = None, None
  for k in range(T2):
    if k % 5 == 0:                       # application instant: command issued at k - 1
      latched, at = (None, None) if k == 0 else ({f: mm[f][k - 1] for f in mm}, k)
    if latched is None:
      ref[k] = old[k] = 0.0
      continue
    c = latched
    ref[k] = c['kp'] * (c['position'] - q[k]) + c['kd'] * (c['velocity'] - qd[k]) + c['effort_ff']
    # the pre-issue behaviour: law at the packet instant, then unit channels (gear² · 1)
    law_at = (c['kp'] * (c['position'] - q[at]) + c['kd'] * (c['velocity'] - qd[at])
              + c['effort_ff'])
    old[k] = law_at + g * g * (q[at] - q[k]) + g * g * (qd[at] - qd[k])
  applied = tr['truth']['mm']['applied_effort'][0, :T2]
  np.testing.assert_allclose(applied, ref, atol=2e-4, rtol=1e-5)
  np.testing.assert_allclose(tr['truth']['mm']['commanded_effort'][0, :T2], ref, atol=2e-4,
                             rtol=1e-5)
  # the kick changes the restoring torque by about −kp·Δq − kd·Δq̇, which the held unit
  # setpoints would not: the test can tell the two apart
  kick = slice(KICK, KICK + 3)
  assert np.max(np.abs(old[kick] - ref[kick])) > 0.5
  # the plan states both cadences
  text = '\n'.join(comp.describe())
  assert ('cadence: packets latched at application instants (period 0.01 s = 5 ticks' in text)
  assert ('law kp(p*-q) + kd(v*-qd) + ff evaluated every physics tick (dt 0.002 s)' in text)


def test_hold_when_uncommanded_holds_the_first_instant_position(hold_run):
  """Uncommanded with hold_when_uncommanded: the setpoint is the joint position captured at the
  first application instant (joint ref 0.4 and sagging under gravity), not `safe_command`; the
  first released command (issued at tick 80) ends the hold."""
  rows, tr, _ = hold_run
  t = tr['truth']['hold']
  q0 = t['joint_position'][0, 0]
  assert abs(q0 - 0.4) < 1e-6
  np.testing.assert_allclose(t['setpoint'][:, :80], q0, atol=1e-6)
  assert abs(q0 - HOLD_SAFE) > 0.2
  np.testing.assert_allclose(t['setpoint'][:, 81:], 0.1, atol=1e-6)
  # the servo holds there against gravity (MJCF kp 30): only a small steady sag
  assert np.max(np.abs(t['joint_position'][0, 1:81] - q0)) < 0.05


def test_trajectory_without_acceleration_limit_is_velocity_limited(hold_run):
  """`trajectory` with command_velocity_limit and no trajectory_acceleration_limit: the setpoint
  moves towards the target by at most V·Δ per application instant (2 ticks) and stops on it;
  retargeting mid-move reverses at once (no acceleration limit)."""
  rows, tr, _ = hold_run
  hold, traj, to, mm = _hold_commands()
  vmax, dt_app = TRAJ['command_velocity_limit'], TRAJ['application_period_s']
  sp, target = 0.0, None
  ref = np.empty(T2)
  for k in range(T2):
    if traj[k][0] == 'trajectory':       # latency 0: released the tick it is issued
      target = traj[k][1]
    if k % 2 == 0 and target is not None:
      sp += np.clip(target - sp, -vmax * dt_app, vmax * dt_app)
    ref[k] = sp
  np.testing.assert_allclose(tr['truth']['traj']['setpoint'][0, :T2], ref, atol=1e-5)
  steps = np.diff(ref[::2])
  assert np.isclose(np.max(np.abs(steps)), vmax * dt_app)      # saturated: velocity-limited
  assert np.isclose(ref[109], 0.5) and ref[110] < ref[109]      # reached, then reversed at once


def test_timeout_on_position_input_applies_the_safe_position(hold_sim, hold_run):
  """Position commands every tick until tick 49, then none: more than timeout_s (10 ticks)
  after the latest release the safe command (logical 0.3, joint 0.3 / s) is the setpoint; the
  stale flag and the timeout instant count match; normalized_output is actuator force over the
  asymmetric forcerange [-2, 3], signed like applied_effort (s = -2)."""
  rows, tr, final = hold_run
  _, _, to, _ = _hold_commands()
  s = TO['logical_units_per_joint_unit']
  t = tr['truth']['to']
  stale = np.array([k - TO_LAST > 10 for k in range(T2 + 1)])   # ticks 0 … T2
  held = np.array([to[min(k, TO_LAST)][1] for k in range(T2 + 1)])
  ref = np.where(stale, TO['safe_command'], held)
  np.testing.assert_array_equal(t['timed_out'][0], stale)
  np.testing.assert_allclose(t['setpoint'][0], ref, atol=1e-6)
  np.testing.assert_allclose(t['joint_position'][0, -1], TO['safe_command'] / s, atol=0.02)
  comp = hold_sim.components['to']
  st = comp.status(jax.tree.map(lambda x: x[0], final.components['to']))
  assert int(st['timeout_instants']) == stale.sum()
  fb = tr['sensor']['to'].sample
  force = fb.applied_effort[0] * s / comp.binding.gear             # actuator force
  want = np.where(force >= 0, force / 3.0, force / 2.0) * np.sign(s)
  np.testing.assert_allclose(fb.normalized_output[0], want, atol=1e-6)
  assert np.isclose(np.max(np.abs(fb.normalized_output[0])), 1.0)   # the clamp shows as ±1
  assert np.all(np.isnan(tr['sensor']['traj'].sample.normalized_output))   # no forcerange
  assert 'normalized_output = actuator_force / forcerange [-2, 3] (MJCF)' in \
      '\n'.join(comp.describe())
