"""fit-profile recovers known values (chosen here, not a shipped profile) from simulated
recordings; tolerances are the fit's own standard errors (4σ), each bounded by a closed form
that does not come from the fit (so an inflated standard error cannot widen a tolerance)."""

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
G = 9.80665


def white_density_se_bound(density, m):
  """A bound on the standard error of a white-noise density fitted from `m` samples, from the
  noise model alone: the cluster-1 Allan variance of white noise from m samples has relative
  variance 3/m (m squared first differences, neighbours correlated), so the density (its square
  root) has relative error sqrt(3/m)/2 = 0.87/sqrt(m); a fit over all cluster sizes that is
  worse than twice that (2/sqrt(m)) is reporting an error it should not have."""
  return 2.0 * np.asarray(density) / math.sqrt(m)


@pytest.fixture(scope='module')
def recordings(tmp_path_factory):
  import fibril_mjx
  from fibril_mjx.workflows import validate
  from fibril_mjx.workflows.validate import common
  d = tmp_path_factory.mktemp('fit')
  dev = validate.inertial.device_from_config('imu', 'fibril_sim/imu', {'period_s': PERIOD})
  # validate's static rig: one device placed on each of the six poses' sites in turn (a group
  # of WORLDS worlds per pose); realization w of every pose is merged into one log, a unit
  # with a sensor per pose. Seed 1: the fit's held-out Allan check compares each of six
  # channels over ~20 cluster sizes with a 4σ limit, and on exact-model data its largest
  # reading over seeds 1-12 was 2.1-4.0σ (median 2.7); seed 7 (this file's seed before the
  # device was placed per world) reads 4.0σ on accel y, that check's own false alarm.
  xml, doc, places = validate.inertial.static_rig(dev, dict(TRUE))
  sim = common.rig_simulation(common.write_rig(d, 'static', xml, doc), placed=True)
  n = int(SECONDS / PERIOD)
  nw = len(places) * WORLDS
  _, trace, _ = sim.rollout(sim.default_params(nw), fibril_mjx.world_keys(1, nw), n,
                            model=common.placements(sim.mj_model, list(places.values()), WORLDS))
  static = []
  for w in range(WORLDS):
    recs = {p: rc.recording_from_trace(trace, j * WORLDS + w, sim=sim)
            for j, p in enumerate(places)}
    rec = rc.Recording({p: r.sensors[common.DUT] for p, r in recs.items()},
                       truth={p: r.truth[common.DUT] for p, r in recs.items()
                              if common.DUT in r.truth},
                       meta=recs['pz'].meta)
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
  # samples the fit uses: 4 of the 6 logs (the last 2 held out), each SECONDS / PERIOD
  # acquisitions less the lost ones
  p = TRUE['loss_probability']
  m = 4 * SECONDS / PERIOD * (1 - p)
  for f in ('angular_velocity_noise_density', 'angular_velocity_random_walk',
            'linear_acceleration_noise_density'):
    for i in range(3):
      got, want, s_i = prof['fields'][f][i], TRUE[f][i], se[f'{f}[{i}]']
      # random walk: from 40 s logs the +1/2 Allan slope rests on ~3 clusters of ~10 s per
      # log, ~12 in all, a relative error of order 1/sqrt(12) / 2 ~ 0.15 (seen: 0.06-0.11); a
      # standard error above a quarter of the value says the fit did not resolve it
      bound = 0.25 * want if 'random_walk' in f else float(white_density_se_bound(want, m))
      tol = 4 * s_i + (0.02 * want if 'random_walk' in f else 0.0)
      print(f'{f}[{i}]: {got:.4g} vs {want:.4g} ± {tol:.3g} (se {s_i:.3g} <= {bound:.3g})')
      assert 0 < s_i <= bound
      assert abs(got - want) <= tol
  t = res['timing']
  assert t['latency_s'] == pytest.approx(TRUE['latency_s'], abs=1e-9)
  # loss: the binomial standard error of the true probability over the timing logs' 2 x
  # (SECONDS / PERIOD) acquisitions, not the fit's
  n = 2 * (SECONDS / PERIOD)
  loss_se = math.sqrt(p * (1 - p) / n)
  assert abs(t['loss_probability'] - p) <= 4 * loss_se
  assert t['loss_se'] == pytest.approx(loss_se, rel=0.15)
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
                                out=tmp_path / 'u.yaml', logs=fit_profile.Logs(six=[path]))
  cal = res['calibration']
  gain, gse = np.asarray(cal['linear_acceleration_gain']), np.asarray(
      cal['linear_acceleration_gain_se'])
  want = np.diag(TRUE['linear_acceleration_scale'])
  nd = np.asarray(TRUE['linear_acceleration_noise_density'])
  # column a = (mean at +g − mean at −g) / 2g over the fitted 70 % of each pose's delivered
  # samples: white noise of output axis i, std nd_i / sqrt(PERIOD)
  n_fit = SECONDS / PERIOD * 0.7 * (1 - TRUE['loss_probability'])
  g_se = np.broadcast_to((math.sqrt(2) * nd / math.sqrt(PERIOD) / math.sqrt(n_fit)
                          / (2 * G))[:, None], (3, 3))
  print('gain', gain, '±', gse, 'closed form', g_se)
  assert np.all(gse <= 1.25 * g_se) and np.all(gse > 0)
  assert np.all(np.abs(gain - want) <= 4 * gse + 1e-5)
  n_per = SECONDS / PERIOD * 0.7
  b_se = nd / math.sqrt(PERIOD) / math.sqrt(2 * n_per)
  assert np.all(np.abs(np.asarray(cal['linear_acceleration_bias'])
                       - TRUE['linear_acceleration_bias']) <= 4 * b_se + 1e-5)
