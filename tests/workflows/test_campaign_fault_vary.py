"""Sensor fault windows drawn per world by a campaign's `vary:` (`ID.faults[i].start_s`,
`.end_s`, `.value`; the one path rule of `fibril_mjx.mechanisms.faults.param_path`, applied to
every component by `fibril_mjx/components/base.py`).

Reference: each world's delivered ticks and sequence numbers computed here in NumPy (float64)
from its drawn window and the sensor's schedule (`Schedule.tick_of`), and its bias offset from
the drawn value against the truth trace; the draws checked against their distribution
(bounds, mean within 4 sigma of U(low, high) for the number of worlds). Error messages of bad
fault paths asserted whole.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml

import fibril_mjx  # noqa: F401  (registers the component types)
from conftest import SENSORS, write_rig
from fibril_mjx.components import base
from fibril_mjx.errors import FibrilError
from fibril_mjx.workflows.campaign import engine, spec

WORLDS = 8
DT = 0.002                    # the rig's timestep
START = (0.01, 0.04)          # dropout start_s ~ U(START)
END = (0.05, 0.09)            # dropout end_s ~ U(END)
BIAS = (-0.5, 0.5)            # bias_step value ~ U(BIAS)
IMU = {'id': 'imu', 'type': 'fibril_sim/imu',
       'config': {'gyroscope_sensor': 'gyro', 'accelerometer_sensor': 'accel',
                  'period_s': 0.004,
                  'faults': [{'type': 'dropout', 'start_s': 0.03, 'end_s': 0.06},
                             {'type': 'bias_step', 'start_s': 0.0, 'value': 0.0}]}}
# an AHRS: a sensor whose own `param_path` knows nothing of faults
AHRS = {'id': 'ahrs', 'type': 'fibril_sim/ahrs',
        'config': {**SENSORS, 'period_s': 0.006,
                   'faults': [{'type': 'dropout', 'start_s': 0.021, 'end_s': 0.05}]}}
VARY = {'imu.faults[0].start_s': {'dist': 'uniform', 'low': START[0], 'high': START[1]},
        'imu.faults[0].end_s': {'dist': 'uniform', 'low': END[0], 'high': END[1]},
        'imu.faults[1].value': {'dist': 'uniform', 'low': BIAS[0], 'high': BIAS[1]},
        'ahrs.faults[0].end_s': {'dist': 'uniform', 'low': END[0], 'high': END[1]}}


def campaign(d, vary, comps=(IMU, AHRS)):
  write_rig(d, list(comps))
  doc = {'fibril_campaign': 1, 'manifest': 'manifest.yaml', 'worlds': WORLDS, 'seed': 5,
         'duration_s': 0.1, 'vary': vary}
  path = d / 'campaign.yaml'
  path.write_text(yaml.safe_dump(doc, sort_keys=False))
  return path


@pytest.fixture(scope='module')
def run(tmp_path_factory):
  plan = engine.Plan(spec.read(campaign(tmp_path_factory.mktemp('fault_vary'), VARY)))
  worlds = np.arange(WORLDS)
  samples = plan.sample(worlds)
  _, flat = plan.run_worlds(worlds, samples, trace=True)
  return plan, {k: v[0] for k, v in samples.items()}, flat


def first_tick(t):
  """First tick at or after `t` s (the window bounds are rounded up to ticks)."""
  return math.ceil(t / DT)


def expected_deliveries(schedule, n_rows, start_s, end_s):
  """`(ticks, sequences)` delivered with latency 0: the schedule's instants outside the
  window `[start_s, end_s)`, row k of the trace being tick k."""
  ticks, seqs, n = [], [], 0
  while schedule.tick_of(n) < n_rows:
    k = schedule.tick_of(n)
    if not first_tick(start_s) <= k < first_tick(end_s):
      ticks.append(k)
      seqs.append(n)
    n += 1
  return np.array(ticks), np.array(seqs)


def check_uniform(x, lo, hi):
  assert np.all((x >= lo) & (x <= hi)), x
  sigma = (hi - lo) / math.sqrt(12 * len(x))
  assert abs(x.mean() - (lo + hi) / 2) < 4 * sigma
  assert len(np.unique(x)) == len(x)


def test_drawn_values_follow_their_distributions(run):
  _, draws, _ = run
  check_uniform(draws['imu.faults[0].start_s'], *START)
  check_uniform(draws['imu.faults[0].end_s'], *END)
  check_uniform(draws['imu.faults[1].value'], *BIAS)
  check_uniform(draws['ahrs.faults[0].end_s'], *END)


@pytest.mark.parametrize('cid, start_path, end_path', [
    ('imu', 'imu.faults[0].start_s', 'imu.faults[0].end_s'),
    ('ahrs', None, 'ahrs.faults[0].end_s')])
def test_each_world_misses_samples_in_its_own_window(run, cid, start_path, end_path):
  plan, draws, flat = run
  schedule = plan.sim.components[cid].schedule
  new = flat[f'sensor/{cid}/new_data'].astype(bool)
  rows = new.shape[1]
  starts = draws[start_path] if start_path else np.full(WORLDS, AHRS['config']['faults'][0]
                                                          ['start_s'])
  ends = draws[end_path]
  # a bound closer than 1e-3 tick to a tick would make the reference's rounding ambiguous
  for t in np.concatenate([starts, ends]):
    assert abs(t / DT - round(t / DT)) > 1e-3
  missing = []
  for w in range(WORLDS):
    ticks, seqs = expected_deliveries(schedule, rows, starts[w], ends[w])
    got = np.nonzero(new[w])[0]
    np.testing.assert_array_equal(got, ticks, err_msg=f'{cid} world {w}')
    np.testing.assert_array_equal(flat[f'sensor/{cid}/sample_tick'][w][got], ticks)
    np.testing.assert_array_equal(flat[f'sensor/{cid}/sequence'][w][got], seqs)
    missing.append(len(np.unique(ticks)))
  assert len(set(missing)) > 1     # the worlds' windows differ, and so do their gaps


def test_bias_value_per_world_is_that_worlds_offset(run):
  """Delivered − truth at each delivered sample = the world's drawn bias_step value, on both
  of the IMU's fault fields (float32: 2e-5 on values of ~10)."""
  _, draws, flat = run
  value = draws['imu.faults[1].value']
  new = flat['sensor/imu/new_data'].astype(bool)
  for name in ('angular_velocity', 'linear_acceleration'):
    for w in range(WORLDS):
      got = flat[f'sensor/imu/{name}'][w][new[w]]
      truth = flat[f'truth/imu/{name}'][w][new[w]]
      np.testing.assert_allclose(got - truth, np.full_like(got, value[w]), atol=2e-5,
                                 err_msg=f'{name} world {w}')


OWNER = "fibril_sim/imu 'imu'"
ERRORS = {
    'out_of_range': ('imu.faults[2].start_s',
                     f"'faults[2].start_s' is not a field of {OWNER}: fault entry 2 out of "
                     'range (faults: has 2 entries, faults[0]..faults[1])'),
    'no_value': ('imu.faults[0].value',
                 f"'faults[0].value' is not a field of {OWNER}: faults[0] is a dropout entry "
                 'without a value; its per-world fields: start_s, end_s'),
    'bad_field': ('imu.faults[1].stop_s',
                  f"'faults[1].stop_s' is not a field of {OWNER}: 'stop_s' is not a per-world "
                  "field of a fault entry (did you mean 'start_s'?); fields of faults[1] "
                  '(bias_step): start_s, end_s, value'),
    'malformed': ('imu.faults.0.start_s',
                  f"'faults.0.start_s' is not a field of {OWNER}: expected faults[i].start_s, "
                  'faults[i].end_s, faults[i].value (i: a fault entry, 0..1)'),
    'no_entries': ('ahrs.faults[0].start_s',
                   "'faults[0].start_s' is not a field of fibril_sim/ahrs 'ahrs': it has no "
                   'fault entries (faults: is empty)'),
}


@pytest.mark.parametrize('path, message', ERRORS.values(), ids=ERRORS.keys())
def test_bad_fault_paths_are_one_line_errors(tmp_path, path, message):
  ahrs = {**AHRS, 'config': {**SENSORS, 'period_s': 0.006}}
  d = campaign(tmp_path, {path: {'dist': 'uniform', 'low': 0.01, 'high': 0.02}},
               comps=(IMU, ahrs))
  with pytest.raises(FibrilError) as info:
    engine.Plan(spec.read(d))
  # one line: the campaign file, the vary path, then the rule
  assert str(info.value) == f'{d}: vary.{path} = {path!r}: {message}'


def test_every_component_class_resolves_fault_paths():
  """Every component class (built-in, registered on import) answers the fault paths with the
  shared rule: none overrides `param_path` / `uses` (a component's own fields go through
  `field_path` / `field_uses`)."""
  classes, todo = [], [base.ComponentBase]
  while todo:
    c = todo.pop()
    classes.append(c)
    todo.extend(c.__subclasses__())
  assert len(classes) > 10
  for c in classes:
    assert c.param_path is base.ComponentBase.param_path, c
    assert c.uses is base.ComponentBase.uses, c


def test_paths_get_and_set_the_entry_leaves(run):
  """`get_param` / `set_param` of `faults[i].FIELD` reach exactly that leaf; `faults` itself
  is not a per-world parameter."""
  plan, _, _ = run
  c = plan.sim.components['imu']
  p = c.default_params()
  assert c.param_path('faults') is None and c.param_path('faults[1].value') == ('faults', 1,
                                                                                 'value')
  assert c.uses('faults[0].end_s')
  assert float(c.get_param(p, 'faults[0].end_s')) == np.float32(0.06)
  q = c.set_param(p, 'faults[1].value', np.float32(0.25))
  assert float(q.faults[1].value) == 0.25 and float(p.faults[1].value) == 0.0
  assert q.faults[0] is p.faults[0] and q.thermal is p.thermal
