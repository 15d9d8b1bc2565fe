"""The exteroceptive example (manifests/flow_quad.yaml: IMU, barometer, optical flow, downward
rangefinder, rolling-shutter camera, lidar over textured ground) runs through `fibril-mjx run`
(2 worlds, 0.4 s, in process): every component is summarized and plotted, and the delivered
samples agree with closed forms of their configuration — the lidar's range error with
√(σ² + q²/12), the camera's row times with its shutter window, the flow's body-rate integral
with the ideal angular rate, the camera's dropped frames with the loss probability."""

import json
import math

import numpy as np
import pytest
import yaml

from fibril_mjx import cli

MANIFEST = 'manifests/flow_quad.yaml'
IDS = ('imu', 'baro', 'flow', 'range', 'cam', 'lidar')


@pytest.fixture(scope='module')
def run(tmp_path_factory):
  out = tmp_path_factory.mktemp('run') / 'out'
  mp = pytest.MonkeyPatch()
  mp.setenv('FIBRIL_MJX_NO_PROGRESS', '1')
  try:
    code = cli.main(['run', MANIFEST, '--worlds', '2', '--duration', '0.4', '--out', str(out)])
  finally:
    mp.undo()
  assert code in (0, None)
  trace = dict(np.load(out / 'trace.npz'))
  cfg = {c['id']: c['config'] for c in yaml.safe_load(open(MANIFEST))['components']}
  return out, trace, cfg


def group(trace, kind, cid):
  p = f'{kind}/{cid}/'
  return {k[len(p):]: v for k, v in trace.items() if k.startswith(p)}


def test_every_component_is_summarized_and_plotted(run):
  out, _, _ = run
  summary = json.loads((out / 'summary.json').read_text())
  for cid in IDS:
    assert summary['components'][cid]['metrics'], cid
    assert (out / f'{cid}.png').stat().st_size > 10_000
  assert summary['diverged']['count'] == 0


def test_lidar_range_error_matches_noise_and_resolution(run):
  _, trace, cfg = run
  s, t = group(trace, 'sensor', 'lidar'), group(trace, 'truth', 'lidar')
  new = s['new_data'].astype(bool)
  r = s['range_m'][new].astype(np.float64)
  ref = t['range_m'][new].astype(np.float64)      # the scan's ideal ranges (kept from it)
  ok = s['beam_valid'][new] & (ref >= 0)
  e = (r - ref)[ok]
  c = cfg['lidar']
  want = math.sqrt(c['noise_stddev_m'] ** 2 + c['resolution_m'] ** 2 / 12)
  assert e.size > 300
  assert abs(e.std() / want - 1) < 5 / math.sqrt(2 * e.size)
  assert abs(e.mean()) < 5 * want / math.sqrt(e.size)
  assert np.all(np.isinf(s['range_m'][new][~s['beam_valid'][new]]))


def test_camera_row_times_lie_in_the_shutter_window_and_frames_drop(run):
  _, trace, cfg = run
  s = group(trace, 'sensor', 'cam')
  c = cfg['cam']
  new = s['new_data'].astype(bool)
  vis = s['visible'][new]
  rt = s['row_time_s'][new][vis]
  v = s['uv_px'][new][vis][:, 1]
  assert vis.any()
  line = c['readout_time_s'] / c['height_px']
  # mid-exposure of the row the landmark lands on (noise moves v by ~0.3 px: 5 σ allowed)
  np.testing.assert_allclose(rt, np.clip(v, 0, c['height_px'] - 1) * line + c['exposure_s'] / 2,
                             atol=5 * c['pixel_noise_stddev_px'] * line + 1e-7)
  frames = 2 * (int(0.4 / c['period_s']) + 1)
  assert new.sum() <= frames
  seq = [np.unique(s['sequence'][w][new[w]]) for w in range(2)]
  lost = sum(int(q.max() + 1 - q.size) for q in seq)
  assert lost <= frames * c['loss_probability'] + 5 * math.sqrt(frames * 0.05 * 0.95) + 1


def test_flow_body_rate_integral_matches_the_ideal_rate(run):
  _, trace, _ = run
  s, t = group(trace, 'sensor', 'flow'), group(trace, 'truth', 'flow')
  dt = float(trace['time_s'][1] - trace['time_s'][0])
  w = t['angular_rate_rad_s'].astype(np.float64)               # (W, T, 3)
  cum = np.cumsum(w, axis=1) * dt
  new = s['new_data'].astype(bool)
  for k in range(2):
    st = s['sample_tick'][k][new[k]]
    want = np.diff(np.concatenate([np.zeros((1, 3)), cum[k][st]]), axis=0)
    np.testing.assert_allclose(s['body_rate_rad'][k][new[k]], want, atol=1e-6)
  assert np.all(s['quality'][new] > 0)
