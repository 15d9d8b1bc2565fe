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


def test_mcap_export_of_lidar_camera_and_flow(run, tmp_path):
  """`export-mcap` writes the three types as their ROS 2 messages; decoded with mcap-ros2-support
  (an independent CDR decoder), each delivered sample's values and stamp equal the trace."""
  from mcap.reader import make_reader
  from mcap_ros2.decoder import DecoderFactory
  out, trace, cfg = run
  path = tmp_path / 'x.mcap'
  assert cli.main(['export-mcap', str(out), '--worlds', '0', '--out', str(path)]) in (0, None)
  got = {}
  with open(path, 'rb') as f:
    for schema, channel, message, dec in make_reader(
        f, decoder_factories=[DecoderFactory()]).iter_decoded_messages(log_time_order=True):
      got.setdefault(channel.topic, []).append((schema.name, dec))
  dt = float(json.loads((out / 'meta.json').read_text())['dt_s'])

  def delivered(cid):
    s = group(trace, 'sensor', cid)
    new = s['new_data'][0].astype(bool)
    return {k: v[0][new] for k, v in s.items()}, s['sample_tick'][0][new] * dt

  def stamp(dec):
    return dec.header.stamp.sec + dec.header.stamp.nanosec * 1e-9

  s, t = delivered('lidar')
  nh, nv = cfg['lidar']['horizontal_samples'], cfg['lidar'].get('vertical_samples', 1)
  assert nv > 1                                    # one LaserScan per ring, azimuth-major beams
  for ring in range(nv):
    scans = got[f'/world_0000/lidar/scan_{ring}']
    assert len(scans) == len(t) and all(n == 'sensor_msgs/msg/LaserScan' for n, _ in scans)
    for (_, dec), r, ts in zip(scans, s['range_m'], t):
      np.testing.assert_array_equal(np.asarray(dec.ranges, np.float32),
                                    r.reshape(nh, nv)[:, ring].astype(np.float32))
      assert abs(stamp(dec) - ts) < 1e-9
    assert scans[0][1].range_max == cfg['lidar']['max_range_m']

  s, t = delivered('cam')
  info, pts = got['/world_0000/cam/camera_info'], got['/world_0000/cam/landmarks']
  assert len(pts) == len(info) == len(t)
  assert info[0][0] == 'sensor_msgs/msg/CameraInfo' and info[0][1].k[0] == cfg['cam']['fx_px']
  for (_, dec), uv, vis, ts in zip(pts, s['uv_px'], s['visible'], t):
    xy = np.array([[p.x, p.y] for p in dec.polygon.points], np.float64)
    np.testing.assert_allclose(xy[vis], uv[vis], rtol=1e-6)
    assert np.all(np.isnan(xy[~vis])) and abs(stamp(dec) - ts) < 1e-9

  s, t = delivered('flow')
  flow, quality = got['/world_0000/flow/flow'], got['/world_0000/flow/quality']
  assert len(flow) == len(quality) == len(t)
  for (_, dec), f, q in zip(flow, s['flow_rad'], s['quality']):
    np.testing.assert_allclose([dec.vector.x, dec.vector.y], f, rtol=1e-6, atol=1e-12)
  assert [dec.data for _, dec in quality] == [int(q) for q in s['quality']]
