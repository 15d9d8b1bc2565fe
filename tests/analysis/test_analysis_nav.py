"""Host-side analysis of the navigation sensors (magnetometer, barometer, airspeed, GNSS,
rangefinder): `fibril-mjx run manifests/survey_quad.yaml` once (4 worlds, 0.5 s, in process),
then every new per-world metric in worlds.csv / summary.json against an independent NumPy
computation from trace.npz, the plots, and robustness to NaN / all-NaN traces."""

import json
import math

import numpy as np
import pytest

from fibril_mjx import analysis, cli

WORLDS, DURATION = 4, 0.5
NAV = {'mag_left': 'fibril_sim/magnetometer', 'mag_right': 'fibril_sim/magnetometer',
       'baro': 'fibril_sim/barometer', 'pitot': 'fibril_sim/airspeed', 'gnss': 'fibril_sim/gnss',
       'lidar': 'fibril_sim/rangefinder'}
METRICS = {
    'fibril_sim/magnetometer': ('magnetic_field_error_rms_ut', 'valid_fraction', 'delivered'),
    'fibril_sim/barometer': ('pressure_error_std_pa', 'pressure_altitude_offset_m',
                             'valid_fraction', 'delivered'),
    'fibril_sim/airspeed': ('differential_pressure_error_rms_pa',
                            'differential_pressure_error_mean_pa', 'valid_fraction',
                            'delivered'),
    'fibril_sim/gnss': ('horizontal_error_rms_m', 'vertical_error_rms_m',
                        'velocity_error_rms_m_s', 'horizontal_within_1sigma_fraction',
                        'fix_fraction', 'delivered'),
    'fibril_sim/rangefinder': ('distance_error_rms_m', 'valid_fraction', 'delivered'),
}
# survey_quad.yaml: the GNSS origin; ISA sea level (barometer defaults)
ORIGIN = (52.2297, 21.0122, 150.0)
A, F = 6378137.0, 1 / 298.257223563


@pytest.fixture(scope='module')
def run(tmp_path_factory, monkeypatch_module):
  out = tmp_path_factory.mktemp('run') / 'out'
  monkeypatch_module.setenv('FIBRIL_MJX_NO_PROGRESS', '1')
  code = cli.main(['run', 'manifests/survey_quad.yaml', '--worlds', str(WORLDS), '--duration',
                   str(DURATION), '--out', str(out)])
  assert code in (0, None)
  trace = dict(np.load(out / 'trace.npz'))
  csv = np.genfromtxt(out / 'worlds.csv', delimiter=',', names=True, deletechars='')
  return out, trace, csv


@pytest.fixture(scope='module')
def monkeypatch_module():
  mp = pytest.MonkeyPatch()
  yield mp
  mp.undo()


def _group(trace, kind, cid):
  p = f'{kind}/{cid}/'
  return {k[len(p):]: v for k, v in trace.items() if k.startswith(p)}


def _at(s, a):
  """Truth `a` (W, T, ...) at each sample's sample tick (written out, not the library's)."""
  w = np.arange(a.shape[0])[:, None]
  return a[w, np.clip(s['sample_tick'], 0, None)]


def _usable(s, *vals):
  ok = s['new_data'].astype(bool) & (s['health'] == 0)
  for v in vals:
    ok &= np.isfinite(v).reshape(v.shape[:2] + (-1,)).all(-1)
  return ok


def _rms_per_world(err2, ok):
  return np.array([math.sqrt(err2[w][ok[w]].mean()) if ok[w].any() else np.nan
                   for w in range(len(ok))])


def _mean_per_world(x, ok):
  return np.array([x[w][ok[w]].mean() if ok[w].any() else np.nan for w in range(len(ok))])


def _frac(part, whole):
  return np.array([part[w][whole[w]].mean() if whole[w].any() else np.nan
                   for w in range(len(whole))])


def _enu(lat_e7, lon_e7, h):
  """WGS-84 geodetic → ENU around ORIGIN, float64 (textbook ECEF route)."""
  e2 = F * (2 - F)

  def ecef(la, lo, hh):
    n = A / np.sqrt(1 - e2 * np.sin(la) ** 2)
    return np.stack([(n + hh) * np.cos(la) * np.cos(lo), (n + hh) * np.cos(la) * np.sin(lo),
                     (n * (1 - e2) + hh) * np.sin(la)], -1)
  la0, lo0 = np.radians(ORIGIN[0]), np.radians(ORIGIN[1])
  d = ecef(np.radians(lat_e7 / 1e7), np.radians(lon_e7 / 1e7), h) - ecef(la0, lo0, ORIGIN[2])
  rot = np.array([[-np.sin(lo0), np.cos(lo0), 0],
                  [-np.sin(la0) * np.cos(lo0), -np.sin(la0) * np.sin(lo0), np.cos(la0)],
                  [np.cos(la0) * np.cos(lo0), np.cos(la0) * np.sin(lo0), np.sin(la0)]])
  return d @ rot.T


def expected(cid, s, t):
  """Independent per-world metrics of component `cid` from its trace groups."""
  new = s['new_data'].astype(bool)
  out = {'delivered': new.sum(1)}
  f64 = lambda x: np.asarray(x, np.float64)  # noqa: E731
  if NAV[cid] == 'fibril_sim/magnetometer':
    z, ref = f64(s['magnetic_field_ut']), _at(s, f64(t['magnetic_field_ut']))
    ok = _usable(s, z, ref)
    out['magnetic_field_error_rms_ut'] = _rms_per_world(((z - ref) ** 2).sum(-1), ok)
    out['valid_fraction'] = _frac(ok, new)
  elif NAV[cid] == 'fibril_sim/barometer':
    p, z = f64(s['pressure_pa']), _at(s, f64(t['site_z_m']))
    ok = _usable(s, p, z)
    h_p = 288.15 / 0.0065 * (1 - (p / 101325.0) ** (1 / 5.255877))
    off = _mean_per_world(h_p - z, ok)
    res = p - 101325.0 * (1 - 0.0065 * (z + off[:, None]) / 288.15) ** 5.255877
    out['pressure_error_std_pa'] = _rms_per_world(res ** 2, ok)
    out['pressure_altitude_offset_m'] = off
    out['valid_fraction'] = _frac(ok, new)
  elif NAV[cid] == 'fibril_sim/airspeed':
    z, ref = f64(s['differential_pressure_pa']), _at(s, f64(t['lagged_pressure_pa']))
    ok = _usable(s, z, ref)
    out['differential_pressure_error_rms_pa'] = _rms_per_world((z - ref) ** 2, ok)
    out['differential_pressure_error_mean_pa'] = _mean_per_world(z - ref, ok)
    out['valid_fraction'] = _frac(ok, new)
  elif NAV[cid] == 'fibril_sim/gnss':
    e = _enu(f64(s['latitude_e7']), f64(s['longitude_e7']), f64(s['height_m'])) - \
        _at(s, f64(t['antenna_position_m']))
    ev = f64(s['velocity_enu_m_s']) - _at(s, f64(t['antenna_velocity_m_s']))
    ok = _usable(s, e, ev) & (s['fix_type'] == 3)
    out['horizontal_error_rms_m'] = _rms_per_world((e[..., :2] ** 2).sum(-1), ok)
    out['vertical_error_rms_m'] = _rms_per_world(e[..., 2] ** 2, ok)
    out['velocity_error_rms_m_s'] = _rms_per_world((ev ** 2).sum(-1), ok)
    inside = (np.abs(e[..., :2]) <= f64(s['horizontal_accuracy_m'])[..., None]).mean(-1)
    out['horizontal_within_1sigma_fraction'] = _mean_per_world(inside, ok)
    out['fix_fraction'] = _frac(s['fix_type'] == 3, new)
  else:
    z, ref = f64(s['distance_m']), _at(s, f64(t['distance_m']))
    valid = _usable(s, z) & s['in_range'].astype(bool)
    ok = valid & (ref >= 0)
    out['distance_error_rms_m'] = _rms_per_world((z - ref) ** 2, ok)
    out['valid_fraction'] = _frac(valid, new)
  return out


@pytest.mark.parametrize('cid', sorted(NAV))
def test_metrics_match_an_independent_numpy_computation(run, cid):
  _, trace, csv = run
  s, t = _group(trace, 'sensor', cid), _group(trace, 'truth', cid)
  want = expected(cid, s, t)
  assert set(want) == set(METRICS[NAV[cid]])
  for name, v in want.items():
    got = csv[f'{cid}/{name}']
    assert np.all(np.isfinite(v)), (cid, name, v)      # the run delivered usable samples
    np.testing.assert_allclose(got, v, rtol=2e-6, atol=1e-9, err_msg=f'{cid}/{name}')


def test_summary_lists_the_new_metrics_and_plots_are_written(run):
  out, _, _ = run
  summary = json.loads((out / 'summary.json').read_text())
  for cid, ctype in NAV.items():
    assert set(METRICS[ctype]) <= set(summary['components'][cid]['metrics'])
    assert (out / f'{cid}.png').stat().st_size > 10_000
  text = (out / 'summary.txt').read_text()
  assert 'horizontal_error_rms_m' in text and 'not drawn' not in text
  # the rotor motor has no forcerange, so its delivered normalized_output is NaN by design:
  # delivered data, not a diverged world (the summary statistics keep every world)
  assert summary['diverged']['count'] == 0, summary['diverged']
  assert 'worlds diverged' not in text


@pytest.mark.parametrize('cid', sorted(NAV))
def test_nan_and_all_nan_traces_never_crash(run, tmp_path, cid):
  _, trace, _ = run
  time_s = trace['time_s']
  s, t = _group(trace, 'sensor', cid), _group(trace, 'truth', cid)
  fns = analysis.for_type(NAV[cid])
  def floats(g, every):   # NaN in every float field at each `every`-th tick
    def nan(v):
      drop = (np.arange(v.shape[1]) % every == 0).reshape((1, -1) + (1,) * (v.ndim - 2))
      return np.where(drop, np.nan, v) if v.dtype.kind == 'f' else v
    return {k: nan(v) for k, v in g.items()}
  for part in (2, 1):          # every other tick NaN, then every tick NaN (a diverged world)
    ss, tt = floats(s, part), floats(t, part)
    with np.errstate(all='ignore'):
      m = fns.metrics(ss, tt)
      assert set(m) == set(METRICS[NAV[cid]])
      if part == 1:            # errors undefined; nothing usable among the delivered
        counts = ('delivered', 'valid_fraction', 'fix_fraction')
        assert all(np.all(np.isnan(v)) for k, v in m.items() if k not in counts), m
        assert np.all(m.get('valid_fraction', np.zeros(1)) == 0), m
      fns.plot(tmp_path / f'{cid}_{part}.png', cid, time_s, ss, tt, 0, m, 'nan test')
    assert (tmp_path / f'{cid}_{part}.png').exists()
