"""A sample describes the state at its stamp (SPEC §4), against MuJoCo C, for the types
`tests/physics/test_sample_time.py` does not cover: the camera (landmark pixels), the lidar
(beam ranges), optical flow (integrated flow and rate) and the motion motor's feedback effort.

The rig and its float64 MuJoCo C reference (`mj_forward` at every tick k with the controls of
tick k) are `tests/truth_rig.py`'s. Every component is ideal (error terms off, latency 0,
period = dt, global shutter, zero exposure, no sweep), so its sample at tick k is a float64
NumPy function of the reference state x_k written here: the pinhole projection of the
landmarks, `mj_ray` along each beam, `dt·(−v_x/d − ω_y, −v_y/d + ω_x)` with (v, ω) the flow
site's velocity in its own frame (`mj_objectVelocity`), and the impedance law
`kp·(p* − q) + kd·(v* − q̇) + ff` on the motion motor's joint.

Tolerances as `tests/physics/test_sample_time.py` (1e-3 of the range over the run + float32
spacing); each check also compares against the reference one tick late, which must be more than
`SHIFT_MARGIN` times worse, so a sample one tick stale fails.
"""

from __future__ import annotations

import numpy as np
import pytest

import truth_rig as rig

SHIFT_MARGIN = 5.0


@pytest.fixture(scope='module')
def run():
  return rig.run()


def at_stamp(name, got, want, atol=1e-6):
  """`rig.compare` at the stamp, then the one-tick-stale reference must be clearly worse."""
  got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
  err = rig.compare(name, got, want, atol=atol)
  stale = float(np.max(np.abs(got[1:] - want[:-1])))
  print(f'{"":44s} one-tick-stale {stale:10.3g}')
  assert stale > SHIFT_MARGIN * err + atol, (name, stale, err)


def _delivered_every_tick(d):
  assert np.all(d.new_data) and np.array_equal(d.sample_tick, np.arange(rig.TICKS + 1))


def test_camera_pixels_at_the_stamp(run):
  _, trace, ref = run
  d = trace['sensor']['cam']
  _delivered_every_tick(d)
  c = rig.CAMERA
  rel = ref['landmarks'] - ref['cam_pos'][:, None, :]            # (T, L, 3) world
  xc = np.einsum('kji,klj->kli', ref['cam_mat'], rel)             # camera frame (site axes)
  assert np.all(xc[..., 2] > 0.5)                                 # every landmark in front
  uv = np.stack([c['fx_px'] * xc[..., 0] / xc[..., 2] + c['cx_px'],
                 c['fy_px'] * xc[..., 1] / xc[..., 2] + c['cy_px']], axis=-1)
  inside = ((uv[..., 0] >= -0.5) & (uv[..., 0] <= c['width_px'] - 0.5)
            & (uv[..., 1] >= -0.5) & (uv[..., 1] <= c['height_px'] - 0.5))
  assert inside.all()                                             # the rig keeps them in view
  np.testing.assert_array_equal(np.asarray(d.sample.visible), inside)
  at_stamp('cam.uv_px', d.sample.uv_px, uv, atol=1e-3)
  at_stamp('cam.depth_m', d.sample.depth_m, xc[..., 2])


def test_lidar_ranges_at_the_stamp(run):
  _, trace, ref = run
  d = trace['sensor']['lidar']
  _delivered_every_tick(d)
  want = ref['lidar_range']
  hit = (want >= 0) & (want <= rig.LIDAR['max_range_m'])
  assert hit.sum() >= 8 and (~hit).sum() >= 1                     # hits and misses both seen
  got = np.asarray(d.sample.range_m, np.float64)
  np.testing.assert_array_equal(np.isfinite(got), hit)
  np.testing.assert_array_equal(np.asarray(d.sample.beam_valid), hit)
  # the beams that hit throughout; a beam's range moves with the rig
  cols = hit.all(axis=0)
  at_stamp('lidar.range_m', got[:, cols], want[:, cols])


def test_optical_flow_at_the_stamp(run):
  _, trace, ref = run
  d = trace['sensor']['flow']
  _delivered_every_tick(d)
  v, w, dist = ref['flow_v_local'], ref['flow_w_local'], ref['flow_dist']
  assert np.all(dist > 0)
  rate = np.stack([-v[:, 0] / dist - w[:, 1], -v[:, 1] / dist + w[:, 0]], axis=1)
  np.testing.assert_allclose(np.asarray(d.sample.integration_time_s), rig.DT, rtol=1e-6)
  at_stamp('flow.flow_rad', d.sample.flow_rad, rig.DT * rate, atol=1e-8)
  at_stamp('flow.body_rate_rad', d.sample.body_rate_rad, rig.DT * w, atol=1e-8)


def test_motion_motor_effort_at_the_stamp(run):
  _, trace, ref = run
  d = trace['sensor']['mm']
  _delivered_every_tick(d)
  at_stamp('mm.applied_effort', d.sample.applied_effort, ref['mm_law'])
  at_stamp('mm.position', d.sample.position, ref['j_mm_q'])
  at_stamp('mm.velocity', d.sample.velocity, ref['j_mm_qd'])
