"""The faults of a motor type's feedback (`feedback_faults:`, SPEC §6.2): a sensor's fault entries
(`fibril_mjx/mechanisms/faults`) run by the one sensing cycle at the feedback instants.

Reference: a float64 NumPy model, written here from the fault table of docs/internals/faults.md,
of what each fault makes of the feedback sequence the joint gives (the fault-free feedback is
the truth of the same tick: latency 0, so the sample of an instant is delivered at it), and the
health sequences of known windows written out by hand from the health table. One rollout, two
worlds, the feedback every 2 ticks; world 1 draws another dropout window (per-world Params).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fibril_mjx
from actuator_rig import DT, motion, motor, scalar, write
from fibril_mjx.batch.simulation import Controller
from fibril_mjx.builder import vary as vary_mod
from fibril_mjx.components.actuators import motion_motor as mm
from fibril_mjx.components.actuators import motor as mo
from fibril_mjx.components.actuators import position_servo as ps
from fibril_mjx.errors import FibrilError
from fibril_mjx.mechanisms.faults import DEGRADED, HEALTHY, INVALID, RECOVERING

T = 64
W = 2
FB = dict(feedback_period_s=2 * DT)     # instants at the even ticks
INSTANTS = np.arange(0, T + 1, 2)
# data faults, each window's bounds half a tick off the grid (rounded up to the next tick)
DATA = [
    {'type': 'bias_step', 'start_s': 0.011, 'end_s': 0.031, 'value': 0.5},
    {'type': 'bias_ramp', 'start_s': 0.021, 'end_s': 0.051, 'value': 30.0,
     'fields': ['velocity']},
    {'type': 'nan', 'start_s': 0.041, 'end_s': 0.049, 'fields': ['applied_effort']},
    {'type': 'stuck', 'start_s': 0.061, 'end_s': 0.081, 'fields': ['position', 'velocity']},
    {'type': 'sentinel', 'start_s': 0.091, 'end_s': 0.101, 'value': -7.0,
     'fields': ['applied_effort']},
    {'type': 'stuck', 'start_s': 0.105, 'end_s': 0.115, 'value': 0.25},
]
DATA_IDS = ('motor', 'motion', 'servo')
DROP_START = (0.031, 0.041)             # per world
DROP = [{'type': 'dropout', 'start_s': 0.031, 'end_s': 0.051}]
STALE = [{'type': 'stale_old_timestamp', 'start_s': 0.021, 'end_s': 0.031},
         {'type': 'invalid_status', 'start_s': 0.061, 'end_s': 0.065},
         {'type': 'stale_new_timestamp', 'start_s': 0.091, 'end_s': 0.101}]
RESET = [{'type': 'reset', 'start_s': 0.041, 'end_s': 0.051, 'warmup_s': 0.01}]
ACTUATOR = [{'type': 'command_dropout', 'start_s': 0.081}]   # beside STALE, on the commands


def components():
  return [motor('motor', 'a_vel', feedback_faults=DATA, **FB),
          motion('motion', feedback_faults=DATA, **FB),
          {'id': 'servo', 'type': 'fibril_sim/position_servo',
           'config': {'actuator': 'a_eff', 'application_period_s': DT, 'feedback_faults': DATA,
                      **FB}},
          motor('drop', 'a_pos', feedback_faults=DROP, feedback_invalid_after_missed=2,
                feedback_recovery_samples=3, **FB),
          motor('stale', 'a_sc', feedback_faults=STALE, faults=ACTUATOR, **FB),
          motor('reset', 'a_dc', feedback_faults=RESET, **FB)]


def policy(obs, k):
  """Commands that keep every joint moving (sines of the tick count)."""
  del obs
  s = jnp.sin(2 * jnp.pi * 4.0 * k.astype(jnp.float32) * DT)
  return {'motor': mo.command('velocity', 3.0 * s), 'motion': mm.command(0.4 * s, 0.0, 6.0, 0.2),
          'servo': ps.command(0.3 * s, 300.0, 4.0), 'drop': mo.command('position', 0.5 * s),
          'stale': mo.command('effort', 2.0 * s), 'reset': mo.command('velocity', 5.0 * s)}, k + 1


@pytest.fixture(scope='module')
def sim(tmp_path_factory):
  return fibril_mjx.load(write(tmp_path_factory.mktemp('fbf'), components()))


@pytest.fixture(scope='module')
def run(sim):
  p = sim.default_params(W)
  p['drop'] = sim.components['drop'].set_param(p['drop'], 'feedback_faults[0].start_s',
                                               jnp.asarray(DROP_START, jnp.float32))
  final, tr, _ = sim.rollout(p, fibril_mjx.world_keys(3, W), T,
                             controller=Controller(policy, init=jnp.int32(0)))
  status = {c: sim.components[c].status(final.components[c]) for c in sim.components}
  return jax.tree.map(np.asarray, (tr['sensor'], tr['truth'], status))


# ------------------------------------------------------------------------------ reference

def first_tick(s):
  return math.inf if s is None else math.ceil(s / DT - 1e-6)


def on(f, k):
  return first_tick(f['start_s']) <= k < first_tick(f.get('end_s'))


def data_reference(clean: dict, entries) -> dict:
  """The sent packets of each instant: `clean` `{field: (ticks,)}` with the data faults of
  `entries` applied in order (float64); stuck without a value holds the last packet sent."""
  out = {n: np.full(len(INSTANTS), np.nan) for n in clean}
  last = None
  for j, k in enumerate(INSTANTS):
    x = {n: float(v[k]) for n, v in clean.items()}
    for f in entries:
      if not on(f, k):
        continue
      for n in f.get('fields', ['position']):
        if f['type'] == 'bias_step':
          x[n] += f['value']
        elif f['type'] == 'bias_ramp':
          x[n] += f['value'] * (k * DT - f['start_s'])
        elif f['type'] == 'nan':
          x[n] = math.nan
        elif f['type'] in ('sentinel', 'stuck') and 'value' in f:
          x[n] = f['value']
        elif last is not None:   # stuck, no value
          x[n] = last[n]
    for n in x:
      out[n][j] = x[n]
    last = x
  return out


# ------------------------------------------------------------------------------ data faults

@pytest.mark.parametrize('cid', DATA_IDS)
def test_data_faults_match_numpy_reference(run, cid):
  """Bias step, bias ramp, NaN, stuck (held and valued) and sentinel on the fields they name,
  at the feedback instants; every instant delivered at its own tick, held between."""
  sensor, truth, _ = run
  fb, tr = sensor[cid], truth[cid]
  fields = ('position', 'velocity', 'applied_effort')
  for w in range(W):
    ref = data_reference({n: tr[n][w].astype(np.float64) for n in fields}, DATA)
    new = fb.new_data[w]
    assert np.array_equal(np.flatnonzero(new), INSTANTS)
    np.testing.assert_array_equal(fb.sample_tick[w][INSTANTS], INSTANTS)
    for n in fields:
      got = getattr(fb.sample, n)[w]
      np.testing.assert_allclose(got[INSTANTS], ref[n], rtol=1e-5, atol=1e-6, err_msg=n)
      held = INSTANTS[INSTANTS + 1 < len(got)]
      np.testing.assert_array_equal(got[held + 1], got[held])
    assert np.ptp(tr['position'][w]) > 1e-3           # the joint moves: stuck is visible
  assert np.all(tr['feedback_health'] == HEALTHY)     # data faults leave the condition OK


# ------------------------------------------------------------------------------ packet faults

def instants_in(f):
  return [k for k in INSTANTS if on(f, k)]


def health_at_instants(truth, cid, w):
  return truth[cid]['feedback_health'][w][INSTANTS]


def test_dropout_sends_nothing_and_health_follows_the_thresholds(run):
  """A dropout window (per world) holds its instants back: no delivery, a sequence gap, the
  count in `feedback_fault_dropped`; with `feedback_invalid_after_missed: 2` and
  `feedback_recovery_samples: 3` the health goes DEGRADED, INVALID, then RECOVERING for
  2 instants and HEALTHY at the 3rd good one."""
  sensor, truth, status = run
  fb = sensor['drop']
  for w, start in enumerate(DROP_START):
    f = {**DROP[0], 'start_s': start}
    gone = instants_in(f)
    sent = [k for k in INSTANTS if k not in gone]
    assert np.array_equal(np.flatnonzero(fb.new_data[w]), sent)
    np.testing.assert_array_equal(fb.sequence[w][sent], np.asarray(sent) // 2)
    assert status['drop']['feedback_fault_dropped'][w] == len(gone)
    health = [HEALTHY] * len(INSTANTS)
    i = int(np.flatnonzero(INSTANTS == gone[0])[0])
    m = len(gone)
    health[i:i + m] = [DEGRADED] + [INVALID] * (m - 1)
    health[i + m:i + m + 2] = [RECOVERING] * 2
    np.testing.assert_array_equal(health_at_instants(truth, 'drop', w), health)
  assert status['drop']['feedback_fault_dropped'].tolist() == [5, 2]


def test_stale_packets_and_invalid_status(run):
  """stale_old_timestamp: the last sent packet with its own sequence and tick;
  stale_new_timestamp: with the instant's; invalid_status: data as usual, health INVALID, then
  RECOVERING for 4 instants and HEALTHY at the 5th (default thresholds). The motor's own
  `faults:` (a command dropout) act beside them, on its commands."""
  sensor, truth, status = run
  # the commands of ticks 41..T (one a tick) lost
  assert np.all(status['stale']['fault_dropped_commands'] == T + 1 - first_tick(0.081))
  fb, tr = sensor['stale'], truth['stale']
  old, bad, new = (instants_in(f) for f in STALE)
  for w in range(W):
    pos = fb.sample.position[w]
    assert np.all(fb.new_data[w][INSTANTS])
    for ks, keep_stamp in ((old, True), (new, False)):
      before = ks[0] - 2
      for k in ks:
        assert pos[k] == pos[before] and pos[k] != tr['position'][w][k]
        want = (before, before // 2) if keep_stamp else (k, k // 2)
        assert (fb.sample_tick[w][k], fb.sequence[w][k]) == want
    for k in (*bad, old[-1] + 2, new[-1] + 2):      # data as usual
      np.testing.assert_allclose(pos[k], tr['position'][w][k], rtol=1e-6)
    health = np.full(len(INSTANTS), HEALTHY)
    i = int(np.flatnonzero(INSTANTS == bad[0])[0])
    health[i] = INVALID
    health[i + 1:i + 5] = RECOVERING
    np.testing.assert_array_equal(health_at_instants(truth, 'stale', w), health)


def test_reset_takes_the_feedback_off_then_warms_up(run):
  """reset: no packets in the window (counted, one reset), then `warmup_s` of packets with the
  health INVALID; the health recovers after 5 good instants."""
  sensor, truth, status = run
  fb = sensor['reset']
  off = instants_in(RESET[0])
  warm = instants_in({'start_s': RESET[0]['end_s'],
                      'end_s': RESET[0]['end_s'] + RESET[0]['warmup_s']})
  assert off == [22, 24] and warm == [26, 28, 30]
  for w in range(W):
    assert np.array_equal(np.flatnonzero(fb.new_data[w]), [k for k in INSTANTS if k not in off])
    health = np.full(len(INSTANTS), HEALTHY)
    i = int(np.flatnonzero(INSTANTS == off[0])[0])
    health[i:i + 2] = DEGRADED                      # two misses (< 3)
    health[i + 2:i + 5] = INVALID                   # warm-up: status bad
    health[i + 5:i + 9] = RECOVERING
    np.testing.assert_array_equal(health_at_instants(truth, 'reset', w), health)
  assert status['reset']['feedback_fault_dropped'].tolist() == [2, 2]
  assert status['reset']['feedback_resets'].tolist() == [1, 1]


# ------------------------------------------------------------------------------ none, vary

def test_without_feedback_faults_nothing_enters_params_state_or_truth(tmp_path):
  sim = fibril_mjx.load(write(tmp_path, [motor('m', 'a_vel'), motion('mm')]))
  for c in sim.components.values():
    assert c.feedback_fault_plan is None and c.default_params().feedback_faults == ()
    s = c.init(c.default_params(), jax.random.PRNGKey(0))
    assert s.feedback_faults is None
    assert 'feedback_health' not in c.truth(s, sim.built.data0)
    assert 'feedback_fault_dropped' not in c.status(s)
    assert c.param_path('feedback_faults[0].start_s') is None


def test_vary_paths_of_feedback_faults(sim):
  servo = sim.components['servo']
  assert servo.param_path('feedback_faults[0].value') == ('feedback_faults', 0, 'value')
  assert servo.param_path('feedback_faults') is None
  assert servo.param_path('faults[0].start_s') is None          # no actuator faults
  d = vary_mod.Distribution('drop.feedback_faults[0].end_s', 'uniform',
                            {'low': (0.05,), 'high': (0.06,)})
  (f,) = vary_mod.resolve(sim, [d], 'campaign.yaml')
  assert f.kind == 'param' and float(f.nominal) == np.float32(0.051)
  cases = {
      'drop.feedback_faults[0].value': 'feedback_faults[0] is a dropout entry without a value; '
                                       'its per-world fields: start_s, end_s',
      'drop.feedback_faults[1].start_s': 'feedback fault entry 1 out of range '
                                         '(feedback_faults: has 1 entry, '
                                         'feedback_faults[0]..feedback_faults[0])',
      'drop.feedback_faults[0].stop_s': "'stop_s' is not a per-world field of a fault entry",
  }
  for path, rule in cases.items():
    bad = vary_mod.Distribution(path, 'uniform', {'low': (0.0,), 'high': (1.0,)})
    with pytest.raises(FibrilError) as info:
      vary_mod.resolve(sim, [bad], 'campaign.yaml')
    assert "is not a field of fibril_sim/motor 'drop': " + rule in str(info.value)


# ------------------------------------------------------------------------------ config rules

P = 'components[0].config.feedback_faults[0]'
CASES = {
    'end_before_start': ([motor('x', 'a_vel', feedback_faults=[
        {'type': 'stuck', 'start_s': 0.5, 'end_s': 0.2}])], P, None,
        'end_s must be > start_s = 0.5'),
    'bias_without_value': ([motor('x', 'a_vel', feedback_faults=[
        {'type': 'bias_step', 'start_s': 0.1}])], P, None, 'a bias_step fault needs a value'),
    'unknown_type': ([motor('x', 'a_vel', feedback_faults=[{'type': 'jam', 'start_s': 0.1}])],
                     P + '.type', "'jam'", "input should be 'dropout'"),
    'actuator_type': ([motor('x', 'a_vel', feedback_faults=[
        {'type': 'command_dropout', 'start_s': 0.1}])], P + '.type', "'command_dropout'",
        "input should be 'dropout'"),
    'unknown_field': ([motor('x', 'a_vel', feedback_faults=[
        {'type': 'nan', 'start_s': 0.1, 'fields': ['torque']}])], P + '.fields[0]', "'torque'",
        'not a data field of the sample; fields: position, velocity, applied_effort, current, '
        'normalized_output'),
    'joint_feedback_field': ([motion('x', feedback_faults=[
        {'type': 'nan', 'start_s': 0.1, 'fields': ['normalized_output']}])], P + '.fields[0]',
        "'normalized_output'",
        'not a data field of the sample; fields: position, velocity, applied_effort, current'),
    'values_per_element': ([motor('x', 'a_vel', feedback_faults=[
        {'type': 'bias_step', 'start_s': 0.1, 'value': [1.0, 2.0]}])], P + '.value',
        '[1.0, 2.0]', "must be a scalar or have 1 values (field 'position')"),
    'health_threshold': ([motor('x', 'a_vel', feedback_invalid_after_missed=0)],
                         'components[0].config.feedback_invalid_after_missed', '0',
                         'greater than or equal to 1'),
    'no_feedback': ([scalar('x', 'a_sc', feedback_faults=[{'type': 'nan', 'start_s': 0.1}])],
                    'components[0].config.feedback_faults', None, 'unknown field'),
}


@pytest.mark.parametrize('case', sorted(CASES))
def test_config_rule(tmp_path, case):
  comps, field, value, rule = CASES[case]
  path = write(tmp_path, comps)
  with pytest.raises(FibrilError) as info:
    fibril_mjx.load(str(path))
  msg = str(info.value)
  start = f'{path}: {field} = ' + ('' if value is None else f'{value}: ')
  lines = [ln for ln in msg.splitlines() if ln.startswith(start)]
  assert lines and any(rule in ln[len(start):] for ln in lines), msg


# ------------------------------------------------------------------------------ groups

GROUP_FAULTS = [{'type': 'stuck', 'start_s': 0.011, 'end_s': 0.031},
                {'type': 'bias_step', 'start_s': 0.021, 'end_s': 0.061, 'value': [0.3],
                 'fields': ['velocity']},
                {'type': 'dropout', 'start_s': 0.071, 'end_s': 0.091}]


def group_policy(obs, k):
  del obs
  s = jnp.sin(2 * jnp.pi * 4.0 * k.astype(jnp.float32) * DT)
  return {'ga': mo.command('effort', 2.0 * s), 'gb': mo.command('effort', -3.0 * s)}, k + 1


def test_grouped_motors_are_bitwise_each_alone(tmp_path, monkeypatch):
  """Two `fibril_sim/motor`s alike but for their actuator, with feedback faults, jitter and
  loss, step as one group (`core/groups.py`); `gb`'s dropout window differs per world. Every
  leaf of the final state and of the trace equals the run with each motor a group of one."""
  from fibril_mjx.core import groups
  from ref_helpers import per_id
  link = dict(feedback_faults=GROUP_FAULTS, feedback_latency_s=0.004, feedback_jitter_s=0.002,
              feedback_loss_probability=0.2, **FB)
  comps = [motor('ga', 'a_sc', **link), motor('gb', 'a_eff', **link)]

  def rollout(sim):
    p = sim.default_params(W)
    p['gb'] = sim.components['gb'].set_param(p['gb'], 'feedback_faults[2].start_s',
                                             jnp.asarray([0.065, 0.081], jnp.float32))
    final, tr, _ = sim.rollout(p, fibril_mjx.world_keys(9, W), T,
                               controller=Controller(group_policy, init=jnp.int32(0)))
    final = per_id(sim.built, final, axis=1)
    status = {c: sim.components[c].status(final.components[c]) for c in ('ga', 'gb')}
    return final, tr, status

  grouped = fibril_mjx.load(write(tmp_path / 'g', comps))
  assert [g.ids for g in grouped.built.actuator_groups] == [('ga', 'gb')]
  a = rollout(grouped)
  monkeypatch.setattr(groups, 'form', lambda components, role_filter: tuple(
      groups.Group((cid,), c, ()) for cid, c in components.items() if role_filter(c)))
  b = rollout(fibril_mjx.load(write(tmp_path / 'a', comps)))
  for x, y in zip(jax.tree.leaves(a[:2]), jax.tree.leaves(b[:2]), strict=True):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  # the windows act per member and per world, in ticks: ga [36, 46) → 5 instants; gb [33, 46)
  # → 6 and [41, 46) → 2
  assert np.asarray(a[2]['ga']['feedback_fault_dropped']).tolist() == [5, 5]
  assert np.asarray(a[2]['gb']['feedback_fault_dropped']).tolist() == [6, 2]
