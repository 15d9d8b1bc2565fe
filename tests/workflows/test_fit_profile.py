"""fit-profile recovers known values (chosen here, not a shipped profile) from simulated
recordings; tolerances are the fit's own standard errors (4σ)."""

import json
import math

import numpy as np
import pytest
import yaml

from fibril_mjx.io import recording as rc

PERIOD = 0.005
TRUE = {
    'angular_velocity_noise_density': [3e-4, 2e-4, 4e-4],
    'angular_velocity_random_walk': [4e-4, 4e-4, 4e-4],
    'linear_acceleration_noise_density': [2e-3, 2e-3, 3e-3],
    'linear_acceleration_scale': [1.01, 0.99, 1.02],
    'linear_acceleration_bias': [0.05, -0.03, 0.02],
    'latency_s': 0.010,
    'loss_probability': 0.05,
}
WORLDS, SECONDS = 6, 40.0


@pytest.fixture(scope='module')
def recordings(tmp_path_factory):
  import fibril_mjx
  from fibril_mjx.workflows import validate
  from fibril_mjx.workflows.validate import common
  d = tmp_path_factory.mktemp('fit')
  dev = validate.inertial.device_from_config('imu', 'fibril_sim/imu', {'period_s': PERIOD})
  xml, doc = validate.inertial.static_rig(dev, dict(TRUE))
  sim = fibril_mjx.load(common._write_rig(d, 'static', xml, doc))
  n = int(SECONDS / PERIOD)
  _, trace = sim.rollout(sim.default_params(WORLDS), fibril_mjx.world_keys(7, WORLDS), n)
  static = []
  for w in range(WORLDS):
    rec = rc.recording_from_trace(trace, w, sim=sim)
    p = rc.write_recording(d / f'w{w}.npz', rec)
    static.append(p)
  return d, static


def test_recording_from_trace_keeps_truth_apart(recordings):
  d, static = recordings
  rec = rc.read_recording(static[0])
  assert set(rec.sensors) == {f'{n}' for n in ('px', 'mx', 'py', 'my', 'pz', 'mz')}
  assert 'sample_time_s' in rec.sensors['pz']
  # truth (if the rollout recorded it) lives under truth/, with its own per-tick time base
  for cid, fields in rec.truth.items():
    assert 'time_s' in fields and cid in rec.sensors
    assert not any(k.startswith('truth') for k in rec.sensors[cid])
  assert rec.meta['source'] == 'fibril_mjx simulation'


def test_fit_profile_recovers_known_values(recordings, tmp_path):
  from fibril_mjx import cli
  d, static = recordings
  out = tmp_path / 'unit_empirical.yaml'
  rc_ = cli.main(['fit-profile', '--type', 'fibril_sim/imu', '--component', 'pz',
                  '--static', *map(str, static), '--timing', *map(str, static[:2]),
                  '--out', str(out)])
  assert rc_ == 0
  prof = yaml.safe_load(out.read_text())
  assert prof['kind'] == 'empirical' and prof['id'] == 'unit_empirical'
  res = json.loads((tmp_path / 'unit_empirical_fit.json').read_text())
  se = {u['field']: u['se'] for u in res['uncertainty']}
  for f in ('angular_velocity_noise_density', 'angular_velocity_random_walk',
            'linear_acceleration_noise_density'):
    for i in range(3):
      got, want = prof['fields'][f][i], TRUE[f][i]
      tol = 4 * se[f'{f}[{i}]'] + (0.02 * want if 'random_walk' in f else 0.0)
      print(f'{f}[{i}]: {got:.4g} vs {want:.4g} ± {tol:.3g}')
      assert abs(got - want) <= tol
  t = res['timing']
  assert t['latency_s'] == pytest.approx(TRUE['latency_s'], abs=1e-9)
  assert abs(t['loss_probability'] - TRUE['loss_probability']) <= 4 * t['loss_se']
  assert t['period_s'] == pytest.approx(PERIOD)
  ev = (tmp_path / 'unit_empirical_evidence.md').read_text()
  for part in ('## Data used', '## Method', '## Fitted values', '## Held-out agreement',
               '## Plots'):
    assert part in ev
  tprof = yaml.safe_load((tmp_path / 'unit_empirical_transport.yaml').read_text())
  assert tprof['kind'] == 'transport'


def test_six_orientation_recovers_scale_and_bias(recordings, tmp_path):
  from fibril_mjx.workflows import fit_profile
  d, static = recordings
  # One unit resting on each face in turn: the six pose sensors of world 0 (no turn-on
  # dispersion is configured, so they are the same unit), concatenated in time.
  rec = rc.read_recording(static[0])
  parts, t0 = {}, 0.0
  for n in ('px', 'mx', 'py', 'my', 'pz', 'mz'):
    f = rec.sensors[n]
    ts = f['sample_time_s'] + t0
    for k, v in f.items():
      parts.setdefault(k, []).append(ts if k == 'sample_time_s' else
                                     (f['arrival_time_s'] + t0 if k == 'arrival_time_s' else v))
    t0 = ts[-1] + 1.0
  six = rc.Recording({'imu': {k: np.concatenate(v) for k, v in parts.items()}},
                     meta={'source': 'test'})
  path = rc.write_recording(tmp_path / 'six.npz', six)
  res = fit_profile.fit_profile(component_type='fibril_sim/imu', component='imu',
                                out=tmp_path / 'u.yaml', six=[path])
  cal = res['calibration']
  gain, gse = np.asarray(cal['linear_acceleration_gain']), np.asarray(
      cal['linear_acceleration_gain_se'])
  want = np.diag(TRUE['linear_acceleration_scale'])
  print('gain', gain, '±', gse)
  assert np.all(np.abs(gain - want) <= 4 * gse + 1e-5)
  nd = np.asarray(TRUE['linear_acceleration_noise_density'])
  n_per = SECONDS / PERIOD * 0.7
  b_se = nd / math.sqrt(PERIOD) / math.sqrt(2 * n_per)
  assert np.all(np.abs(np.asarray(cal['linear_acceleration_bias'])
                       - TRUE['linear_acceleration_bias']) <= 4 * b_se + 1e-5)
