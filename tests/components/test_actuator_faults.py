"""Actuator faults (SPEC §6.5, `fibril_mjx/mechanisms/faults/actuator.py`) against references
written here: a float64 NumPy model of the controls each fault type writes (open loop, a
scalar actuator on a `<motor>`), and MuJoCo C (`mj_step`) driven by the NumPy-expected controls
of a motor on a `<position>` actuator, whose faulted force depends on the joint state (closed
loop). Three worlds draw different windows (per-world `FaultParams`); one of them is also run
alone. The fault state is in the truth, never in the RL observation.
"""

from __future__ import annotations

import math
import textwrap

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import fibril_mjx
from fibril_mjx.builder import vary as vary_mod
from fibril_mjx.components.actuators import motor as mo
from fibril_mjx.components.actuators.scalar_actuator import ScalarCommand
from fibril_mjx.errors import FibrilError
from fibril_mjx.mechanisms.faults import actuator as fa
from fibril_mjx.mechanisms.faults.spec import FaultParams
from ref_helpers import write_manifest

DT = 0.002
T = 260
W = 3
XML = textwrap.dedent("""\
    <mujoco model="fault_rig">
      <option timestep="0.002" integrator="Euler" gravity="0 0 0"/>
      <default><geom contype="0" conaffinity="0"/></default>
      <worldbody>
        <body name="b_m"><joint name="j_m" type="hinge" axis="0 0 1" damping="0.02"/>
          <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="0.5"/></body>
        <body name="b_p" pos="1 0 0"><joint name="j_p" type="hinge" axis="0 0 1"/>
          <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="0.5"/></body>
        <body name="b_u" pos="2 0 0"><joint name="j_u" type="hinge" axis="0 0 1"/>
          <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="0.5"/></body>
      </worldbody>
      <actuator>
        <motor name="a_m" joint="j_m" gear="2" forcelimited="true" forcerange="-1.5 1.5"/>
        <position name="a_p" joint="j_p" kp="20" kv="0.5" gear="1.5" forcelimited="true"
                  forcerange="-4 4"/>
        <motor name="a_u" joint="j_u"/>
        <general name="a_f" joint="j_u" dyntype="filter" dynprm="0.05"/>
        <dcmotor name="a_dc" joint="j_u" resistance="2" motorconst="0.1" input="vel"
                 controller="0 0 0.05"/>
      </actuator>
    </mujoco>
    """)
M_GEAR, M_FR = 2.0, 1.5                     # a_m
KP, KV, P_GEAR, P_FR = 20.0, 0.5, 1.5, 4.0  # a_p
SC_FAULTS = [
    {'type': 'loss_of_authority', 'start_s': 0.02, 'end_s': 0.08, 'value': 0.4, 'ramp_s': 0.03},
    {'type': 'command_dropout', 'start_s': 0.1, 'end_s': 0.14},
    {'type': 'stuck', 'start_s': 0.16, 'end_s': 0.2},
    {'type': 'derating', 'start_s': 0.22, 'end_s': 0.3, 'value': 0.5},
    {'type': 'stuck', 'start_s': 0.32, 'end_s': 0.34, 'value': 0.25},
]
MP_FAULTS = [
    {'type': 'loss_of_authority', 'start_s': 0.05, 'end_s': 0.15, 'value': 0.3},
    {'type': 'stuck', 'start_s': 0.2, 'end_s': 0.25},
    {'type': 'derating', 'start_s': 0.3, 'end_s': 0.4, 'value': 0.25},
    {'type': 'command_dropout', 'start_s': 0.4, 'end_s': 0.44},
]
MP_EVENTS = {0: 0.5, 90: -0.4, 120: 0.3, 160: -0.5, 210: 0.8, 230: 0.2}
# per-world windows: world w's sc loss-of-authority start and mp stuck start
SC_START = (0.02, 0.03, 0.05)
MP_STUCK = (0.2, 0.21, 0.185)


def write(tmp, components):
  return write_manifest(tmp, XML, components, model='rig.xml')


def components(sc_faults=SC_FAULTS, mp_faults=MP_FAULTS):
  sc = {'actuator': 'a_m', **({'faults': sc_faults} if sc_faults else {})}
  mp = {'actuator': 'a_p', 'application_period_s': DT,
        **({'faults': mp_faults} if mp_faults else {})}
  return [{'id': 'sc', 'type': 'fibril_sim/scalar_actuator', 'config': sc},
          {'id': 'mp', 'type': 'fibril_sim/motor', 'config': mp}]


# ------------------------------------------------------------------------------ references

def first_tick(s):
  return math.inf if s is None else math.ceil(s / DT - 1e-6)


def on(f, k, start=None):
  s = f['start_s'] if start is None else start
  return first_tick(s) <= k < first_tick(f.get('end_s'))


class Faults:
  """The fault entries of one world in float64 (the windows' rule of the sensor faults)."""

  def __init__(self, entries):
    self.entries = entries
    self.held = {}
    self.was = [False] * len(entries)

  def dropped(self, k):
    return any(f['type'] == 'command_dropout' and on(f, k) for f in self.entries)

  def apply(self, k, c, force, ctrl_of, limit, prev):
    """Controls at tick `k`: nominal `c`, `force(c)` the actuator force, `ctrl_of(F)` its
    inverse, `limit` the joint-effort limit (lo, hi) over the gear, `prev` the control in force
    before the tick."""
    t = k * DT
    act = [on(f, k) for f in self.entries]
    lam, der = 1.0, 1.0
    for f, a in zip(self.entries, act):
      if a and f['type'] == 'loss_of_authority':
        r = f.get('ramp_s', 0.0)
        lam *= (1 + (f['value'] - 1) * min(1.0, (t - f['start_s']) / r)) if r else f['value']
      if a and f['type'] == 'derating':
        der *= f['value']
    out = c
    if any(a and f['type'] in ('loss_of_authority', 'derating')
           for f, a in zip(self.entries, act)):
      F = force(c) * lam
      if any(f['type'] == 'derating' for f in self.entries):
        F = np.clip(F, der * limit[0], der * limit[1])
      out = ctrl_of(F)
    for i, (f, a) in enumerate(zip(self.entries, act)):
      if f['type'] == 'stuck':
        if a and not self.was[i]:
          self.held[i] = f.get('value', prev)
        if a:
          out = self.held[i]
    self.was = act
    return out


def scalar_commands():
  rng = np.random.default_rng(5)
  value = (2.0 * np.sin(0.03 * np.arange(T)) + 0.3).astype(np.float32)
  issued = rng.random(T) < 0.8
  issued[0] = True
  return value, issued


def scalar_reference(faults):
  """`fault_ctrl` of the scalar actuator (latency 0, every tick, no processing) on a_m."""
  value, issued = scalar_commands()
  fs, held, prev, dropped = Faults(faults), 0.0, 0.0, 0
  out = np.zeros(T + 1)
  for k in range(T + 1):
    if k < T and issued[k]:
      if fs.dropped(k):
        dropped += 1
      else:
        held = float(value[k])
    out[k] = prev = fs.apply(k, held, lambda c: np.clip(c, -M_FR, M_FR), lambda F: F,
                             (-M_FR, M_FR), prev)
  return out, dropped


def c_reference(sc_ctrl, mp_faults):
  """MuJoCo C: a_m driven by `sc_ctrl`, a_p by the motor's position setpoint with the faults
  written in force space at each tick's state. Returns `(q_p, ctrl_p, qpos of tick T)`."""
  m = mujoco.MjModel.from_xml_string(XML)
  d = mujoco.MjData(m)
  fs, setpoint, prev = Faults(mp_faults), None, 0.0
  q_p, ctrl_p = np.zeros(T + 1), np.zeros(T + 1)
  for k in range(T + 1):
    q, qd = float(d.qpos[1]), float(d.qvel[1])
    qpos = d.qpos.copy()                     # x_k: the state tick k acts on
    if k == 0:
      prev = P_GEAR * q                      # reset: hold the current position
    if k in MP_EVENTS and not fs.dropped(k):
      setpoint = MP_EVENTS[k]
    L, V = P_GEAR * q, P_GEAR * qd
    force = lambda c: np.clip(KP * c - KP * L - KV * V, -P_FR, P_FR)  # noqa: E731
    ctrl_of = lambda F: (F + KP * L + KV * V) / KP                    # noqa: E731
    c = fs.apply(k, P_GEAR * setpoint, force, ctrl_of, (-P_FR, P_FR), prev)
    d.ctrl[:] = 0.0
    d.ctrl[0], d.ctrl[1] = sc_ctrl[k], c
    q_p[k], ctrl_p[k], prev = q, c, c
    mujoco.mj_step(m, d)
  return q_p, ctrl_p, qpos


def world_faults(w):
  sc = [dict(f) for f in SC_FAULTS]
  mp = [dict(f) for f in MP_FAULTS]
  sc[0]['start_s'], mp[1]['start_s'] = SC_START[w], MP_STUCK[w]
  return sc, mp


# ------------------------------------------------------------------------------ the run

def command_trace(n_worlds):
  value, issued = scalar_commands()
  kind = np.zeros(T, np.int32)
  pos = np.zeros(T, np.float32)
  for k, v in MP_EVENTS.items():
    kind[k], pos[k] = mo.KINDS.index('position'), v
  b = lambda x: jnp.asarray(np.broadcast_to(x[:, None], (T, n_worlds)))  # noqa: E731
  return {'sc': ScalarCommand(b(value), b(issued)),
          'mp': mo.MotorCommand(b(kind), b(pos), b(np.zeros(T, bool)),
                                b(np.zeros(T, np.float32)))}


def per_world_params(sim, n):
  p = sim.default_params(n)
  sc, mp = sim.components['sc'], sim.components['mp']
  p['sc'] = sc.set_param(p['sc'], 'faults[0].start_s', jnp.asarray(SC_START[:n], jnp.float32))
  p['mp'] = mp.set_param(p['mp'], 'faults[1].start_s', jnp.asarray(MP_STUCK[:n], jnp.float32))
  return p


@pytest.fixture(scope='module')
def sim(tmp_path_factory):
  return fibril_mjx.load(write(tmp_path_factory.mktemp('faults'), components()))


@pytest.fixture(scope='module')
def run(sim):
  final, tr, _ = sim.rollout(per_world_params(sim, W), fibril_mjx.world_keys(0, W), T,
                             commands=command_trace(W))
  return jax.tree.map(np.asarray, tr), final


def test_scalar_faults_match_numpy_reference(run, sim):
  """Loss of authority (ramped), dropout, stuck (held, given), derating: the controls each
  world writes, against the float64 model with that world's window."""
  tr, final = run
  for w in range(W):
    ref, dropped = scalar_reference(world_faults(w)[0])
    np.testing.assert_allclose(tr['truth']['sc']['fault_ctrl'][w], ref, rtol=1e-5, atol=1e-6)
    st = sim.components['sc'].status(jax.tree.map(lambda x: x[w], final.components['sc']))
    assert int(st['fault_dropped_commands']) == dropped > 0
  t = tr['truth']['sc']
  auth = t['fault_authority'][0]
  assert auth.max() == 1.0 and np.isclose(auth.min(), 0.4) and len(np.unique(auth)) > 10
  assert t['fault_derating'][0].min() == np.float32(0.5)
  assert t['fault_stuck'][0].sum() == 30 and t['fault_command_dropout'][0].sum() == 20
  # the worlds' windows differ, so do their controls
  assert not np.allclose(t['fault_ctrl'][0], t['fault_ctrl'][2])


def test_motor_faults_match_mujoco_c(run):
  """Closed loop through physics: a motor on a <position> actuator with loss of authority,
  stuck, derating and dropout, against MuJoCo C driven by the NumPy-expected controls.
  Tolerance: float32 MJX vs float64 C over 260 Euler steps (~1e-6 relative per step)."""
  tr, final = run
  for w in range(W):
    sc_f, mp_f = world_faults(w)
    sc_ref, _ = scalar_reference(sc_f)
    q_ref, c_ref, qpos = c_reference(sc_ref, mp_f)
    np.testing.assert_allclose(tr['truth']['mp']['joint_position'][w], q_ref, atol=2e-4)
    np.testing.assert_allclose(tr['truth']['mp']['fault_ctrl'][w], c_ref, atol=2e-3)
    # the scalar's faulted controls reached the physics: the integrated joint agrees
    np.testing.assert_allclose(np.asarray(final.data.qpos)[w], qpos, atol=2e-4)
  # the faults act: a fault-free run would hold the setpoint differently
  assert tr['truth']['mp']['fault_active'][0].sum() == 50 + 25 + 50 + 20


def test_vmapped_worlds_equal_single_worlds(run, sim):
  """Each world of the batch (its own windows) equals the same world run alone, bitwise."""
  tr, _ = run
  params, keys = per_world_params(sim, W), fibril_mjx.world_keys(0, W)
  commands = jax.tree.map(lambda x: x[:, :1], command_trace(W))
  for w in range(W):
    p = jax.tree.map(lambda x, w=w: x[w:w + 1], params)
    _, one, _ = sim.rollout(p, keys[w:w + 1], T, commands=commands)
    for cid in ('sc', 'mp'):
      for k, v in one['truth'][cid].items():
        np.testing.assert_array_equal(np.asarray(v)[0], tr['truth'][cid][k][w],
                                      err_msg=f'{cid}.{k} world {w}')


def test_stages_jit_equals_eager():
  plan = fa.ActuatorFaultPlan(('loss_of_authority', 'derating', 'stuck'), (0.01, 0.0, 0.0),
                              (True, True, False), ((), (), ()), 2, DT)
  fps = tuple(FaultParams(jnp.float32(a), jnp.float32(b), jnp.float32(v))
              for a, b, v in ((0.0, 1.0, 0.3), (0.004, 1.0, 0.5), (0.006, 1.0, 0.0)))
  fs = fa.init_state(plan)

  def stages(tick):
    on = fa.windows(plan, fps, tick)
    lam, der = fa.gains(plan, fps, on, tick)
    f = fa.faulted_forces(jnp.array([1.0, -3.0]), jnp.array([2.0, 1.0]), lam, der,
                          (-1.0, 1.5))
    return f, fa.stuck(plan, fps, fs, on, jnp.array([0.1, 0.2]), f)
  for tick in (0, 2, 3, 4):   # XLA may fuse differently: equal to float32 rounding
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6),
                 jax.jit(stages)(tick), stages(tick))
  # tick 1: λ = 1 − 0.7·0.2, no derating yet (effort −λ within (−1, 1.5))
  np.testing.assert_allclose(stages(1)[0], np.array([1.0, -3.0]) * 0.86, rtol=1e-6)
  # tick 2: λ = 0.72, derating 0.5: effort −0.72 clipped to −0.5, both channels scaled alike
  np.testing.assert_allclose(stages(2)[0], np.array([0.72, -2.16]) * 0.5 / 0.72, rtol=1e-6)
  # tick 3: the stuck window's first tick latches the incoming controls
  np.testing.assert_allclose(stages(3)[1][0], [0.1, 0.2])


# ------------------------------------------------------------------------------ no plan, vary, RL

def test_without_faults_nothing_enters_params_or_state(tmp_path):
  sim = fibril_mjx.load(write(tmp_path, components(None, None)))
  for cid in ('sc', 'mp'):
    c = sim.components[cid]
    assert c.fault_plan is None and c.default_params().faults == ()
    assert c.init(c.default_params(), jax.random.PRNGKey(0)).faults is None
    assert not any(k.startswith('fault') for k in jax.eval_shape(
        lambda c=c: c.truth(c.init(c.default_params(), jax.random.PRNGKey(0)),
                            sim.built.data0)))
    assert c.param_path('faults[0].start_s') is None


def test_vary_resolves_fault_windows(sim):
  d = vary_mod.Distribution('mp.faults[1].start_s', 'uniform', {'low': (0.1,), 'high': (0.3,)})
  (f,) = vary_mod.resolve(sim, [d], 'campaign.yaml')
  assert f.kind == 'param' and float(f.nominal) == np.float32(0.2)
  x, _ = vary_mod.sample(f, 0, np.arange(64))
  assert np.all((x >= 0.1) & (x <= 0.3)) and np.std(x) > 0.03
  bad = vary_mod.Distribution('mp.faults[3].value', 'uniform', {'low': (0.0,), 'high': (1.0,)})
  with pytest.raises(FibrilError, match='not a field of fibril_sim/motor'):
    vary_mod.resolve(sim, [bad], 'campaign.yaml')   # a dropout entry has no value


def test_rl_observation_excludes_fault_state(tmp_path):
  """Per-episode windows drawn through `vary=`; the observation (delivered feedback) has the
  layout of the fault-free component, the fault flags are in the truth only."""
  from fibril_mjx.rl.env import FibrilEnv, Task
  comps = components(None, [{'type': 'loss_of_authority', 'start_s': 0.0, 'end_s': 0.01,
                             'value': 0.2}])
  task = Task(observe={'mp': None}, action_size=1,
              commands=lambda a: {'mp': mo.command('position', a[0])},
              reward=lambda out, goal, a: (jnp.float32(0.0), {}), control_ticks=2)
  env = FibrilEnv(str(write(tmp_path, comps)), task, vary={
      'mp.faults[0].start_s': {'dist': 'uniform', 'low': 0.0, 'high': 0.004}})
  # the delivered feedback fields and new_data, as without faults
  assert env.observation_size == len(mo.Feedback._fields) + 1
  reset = jax.jit(env.reset)
  s0, s1 = reset(jax.random.PRNGKey(0)), reset(jax.random.PRNGKey(3))
  starts = [float(s.info['draws']['mp.faults[0].start_s']) for s in (s0, s1)]
  assert starts[0] != starts[1]
  assert 'fault_active' in env.sim.components['mp'].truth(s0.pipeline_state.components['mp'],
                                                          s0.pipeline_state.data)


# ------------------------------------------------------------------------------ config rules

def config_error(tmp_path, comps):
  path = write(tmp_path, comps)
  with pytest.raises(FibrilError) as info:
    fibril_mjx.load(str(path))
  return path, str(info.value)


def scalar_on(actuator, fault):
  return [{'id': 'x', 'type': 'fibril_sim/scalar_actuator',
           'config': {'actuator': actuator, 'faults': [fault]}}]


P = 'components[0].config.faults[0]'
CASES = {
    'end_before_start': (scalar_on('a_m', {'type': 'stuck', 'start_s': 0.5, 'end_s': 0.2}), P,
                         None, 'end_s must be > start_s = 0.5'),
    'no_gain': (scalar_on('a_m', {'type': 'loss_of_authority', 'start_s': 0.1}), P, None,
                'a loss_of_authority fault needs a value: one number in [0, 1] (the gain)'),
    'derating_range': (scalar_on('a_m', {'type': 'derating', 'start_s': 0.1, 'value': 1.5}), P,
                       None, 'a derating value must be in [0, 1], got 1.5'),
    'dropout_value': (scalar_on('a_m', {'type': 'command_dropout', 'start_s': 0.1,
                                        'value': 1.0}), P, None,
                      'a command_dropout fault takes no value'),
    'ramp_not_loa': (scalar_on('a_m', {'type': 'stuck', 'start_s': 0.1, 'ramp_s': 0.1}), P, None,
                     'ramp_s is a loss_of_authority field'),
    'unknown_type': (scalar_on('a_m', {'type': 'jam', 'start_s': 0.1}), P + '.type', "'jam'",
                     "input should be 'loss_of_authority', 'stuck', 'command_dropout' or "
                     "'derating'"),
    'unknown_key': (scalar_on('a_m', {'type': 'stuck', 'start_s': 0.1, 'stop_s': 1.0}),
                    P + '.stop_s', '1.0', 'unknown field'),
    'stuck_values': (scalar_on('a_m', {'type': 'stuck', 'start_s': 0.1, 'value': [1.0, 2.0]}),
                     P + '.value', '[1.0, 2.0]',
                     'must be a scalar or a list of 1 (one value per channel: a_m)'),
    'derating_no_limit': (scalar_on('a_u', {'type': 'derating', 'start_s': 0.1, 'value': 0.5}),
                          P + '.type', "'derating'", 'a derating fault scales a force limit; a_u '
                          'has no limit: give the MJCF actuator a forcerange or its joint an '
                          'actuatorfrcrange'),
    'authority_dynamics': (scalar_on('a_f', {'type': 'loss_of_authority', 'start_s': 0.1,
                                             'value': 0.5}), P + '.type', "'loss_of_authority'",
                           "a loss_of_authority fault rewrites the force of a fixed-gain MJCF "
                           "actuator without activation dynamics (<motor>, <position>, "
                           "<velocity>); 'a_f' is <motor> with activation dynamics"),
    'authority_dcmotor': ([{'id': 'x', 'type': 'fibril_sim/motor', 'config': {
        'actuator': 'a_dc', 'application_period_s': DT,
        'faults': [{'type': 'derating', 'start_s': 0.1, 'value': 0.5}]}}], P + '.type',
        "'derating'", "a derating fault rewrites the force of a fixed-gain MJCF actuator "
        "without activation dynamics (<motor>, <position>, <velocity>); 'a_dc' is dcmotor "
        "input=\"vel\""),
    'servo_no_limit': ([{'id': 'x', 'type': 'fibril_sim/position_servo', 'config': {
        'actuator': 'a_u', 'application_period_s': DT,
        'faults': [{'type': 'derating', 'start_s': 0.1, 'value': 0.5}]}}], P + '.type',
        "'derating'", 'a derating fault scales a force limit; the servo limits its torque itself '
        'and torque_limit is unset'),
}


@pytest.mark.parametrize('case', sorted(CASES))
def test_config_rule(tmp_path, case):
  comps, field, value, rule = CASES[case]
  path, msg = config_error(tmp_path, comps)
  start = f'{path}: {field} = ' + ('' if value is None else f'{value}: ')
  lines = [ln for ln in msg.splitlines() if ln.startswith(start)]
  assert lines and any(rule in ln[len(start):] for ln in lines), msg
