"""The moving-camera rig of `fibril_sim/camera` in `fibril-mjx validate`: rolling-shutter
geometry under motion.

The camera rides a slide joint along the world direction (0, 0.6, 0.8) at a constant
`SPEED` (a stiff velocity servo, gravity off), looking along world +x at a GRID × GRID plane
of landmark sites DEPTH m ahead (on the pinhole rays of pixels spanning 30–70 % of the image,
so the grid stays in view over the ±0.5 m travel). Moving across the rows, the camera makes
each landmark's row time depend on where it lands, so the rolling-shutter fixed point is
exercised, not just its first step.

Reference (float64, `reference`): for each delivered frame, p₀ the camera position at its
sample tick (the component's truth), v the commanded velocity; the landmark's row time is the
converged fixed point τ* = clip(v_px(τ*), 0, H − 1)·readout/H + exposure/2 of the OpenCV
projection (pinhole + Brown–Conrady) from p₀ + v·τ*; its pixel is that projection at τ*, its
blur the projection at τ* + exposure/2 minus the one at τ* − exposure/2. The motion is a pure
translation at constant velocity, so this is also what the device would see.

| check | compares |
| --- | --- |
| `camera_moving_reprojection` | mean pixel − reference at τ*, per landmark (pixel noise averages out) |
| `camera_moving_row_time` | row_time_s vs τ* |
| `camera_moving_blur` | blur_px vs the reference blur |
"""

from __future__ import annotations

import math

import numpy as np

from fibril_mjx.workflows.validate.common import K_SIGMA, Check, fmt, write_rig, rig_simulation
from fibril_mjx.workflows.validate import common
from fibril_mjx.mechanisms.rng import world_keys

GRID = 4
DEPTH = 5.0                   # m, the landmark plane ahead of the camera's mid-travel point
SPEED = 0.5                   # m/s along AXIS
AXIS = np.array([0.0, 0.6, 0.8])
SKIP = 3                      # frames at the start (the servo reaching its speed)
# camera axes in the world (site xyaxes "0 -1 0 0 0 -1"): columns x, y, z (optical axis +x)
R_CAM = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])


def moving_rig(cfg: dict, overrides: dict, duration_s: float):
  """`(xml, manifest dict, landmark world points (n, 3))` of the rig, the camera passing the
  origin at mid-run."""
  fx, fy, cx, cy = (float(cfg[k]) for k in ('fx_px', 'fy_px', 'cx_px', 'cy_px'))
  us = np.linspace(0.3, 0.7, GRID) * cfg['width_px']
  vs = np.linspace(0.3, 0.7, GRID) * cfg['height_px']
  pts = np.array([(DEPTH, -(u - cx) / fx * DEPTH, -(v - cy) / fy * DEPTH)
                  for v in vs for u in us])
  start = -0.5 * SPEED * duration_s * AXIS
  sites = ''.join(f'    <site name="lm{i}" pos="{x!r} {y!r} {z!r}"/>\n'
                  for i, (x, y, z) in enumerate(pts.tolist()))
  dt = min(0.001, float(cfg['period_s']) / 4)
  axis = ' '.join(repr(float(a)) for a in AXIS)
  xml = '\n'.join([
      '<mujoco model="fibril_validate_camera_moving">',
      f'  <option timestep="{dt!r}" gravity="0 0 0" integrator="implicitfast"/>',
      '  <worldbody>', sites.rstrip('\n'),
      f'    <body name="carriage" pos="{" ".join(repr(float(s)) for s in start)}">',
      f'      <joint name="drive" type="slide" axis="{axis}"/>',
      '      <geom type="box" size="0.02 0.02 0.02" mass="1" contype="0" conaffinity="0"'
      ' rgba="0 0 0 0"/>',
      '      <site name="s_cam" xyaxes="0 -1 0 0 0 -1"/>',
      '    </body>', '  </worldbody>',
      '  <actuator><velocity name="drive" joint="drive" kv="100000"/></actuator>',
      '</mujoco>', ''])
  c = dict(cfg, **overrides)
  c = {k: v for k, v in c.items() if k != 'faults'}
  c.update(site='s_cam', landmarks=[f'lm{i}' for i in range(len(pts))], latency_s=0.0,
           jitter_s=0.0, loss_probability=0.0)
  script = {'actuator': 'drive', 'waveform': 'sine', 'offset': SPEED, 'amplitude': 0.0,
            'frequency_hz': 1.0}
  doc = {'fibril_manifest': 1, 'model': 'moving.xml', 'actuator_script': [script],
         'components': [{'id': 'dut', 'type': 'fibril_sim/camera', 'config': c}]}
  return xml, doc, pts


def project(cfg, xc):
  """Float64 OpenCV projection (pinhole + Brown–Conrady) of camera-frame points `(..., 3)`:
  `(uv (..., 2), visible (...))` — in front, in the image, distortion monotonic."""
  z = xc[..., 2]
  x, y = xc[..., 0] / z, xc[..., 1] / z
  k1, k2, p1, p2, k3 = (float(v) for v in cfg.get('distortion') or [0.0] * 5)
  r2 = x * x + y * y
  rad = 1 + k1 * r2 + k2 * r2 ** 2 + k3 * r2 ** 3
  xd = x * rad + 2 * p1 * x * y + p2 * (r2 + 2 * x * x)
  yd = y * rad + p1 * (r2 + 2 * y * y) + 2 * p2 * x * y
  uv = np.stack([float(cfg['fx_px']) * xd + float(cfg['cx_px']),
                 float(cfg['fy_px']) * yd + float(cfg['cy_px'])], -1)
  inside = ((uv[..., 0] >= -0.5) & (uv[..., 0] <= cfg['width_px'] - 0.5)
            & (uv[..., 1] >= -0.5) & (uv[..., 1] <= cfg['height_px'] - 0.5))
  mono = 1 + 3 * k1 * r2 + 5 * k2 * r2 ** 2 + 7 * k3 * r2 ** 3 > 0
  return uv, (z > float(cfg.get('min_depth_m', 0.01))) & inside & mono


def reference(cfg, pts, p0, vel, iterations: int = 60):
  """Float64 `(uv (L, 2), τ* (L,), blur (L, 2), visible (L,))` of one frame whose sample tick
  has the camera at `p0`, moving at `vel` (world, constant)."""
  line = (float(cfg.get('readout_time_s', 0.0)) / cfg['height_px']
          if cfg.get('shutter') == 'rolling' else 0.0)
  half = 0.5 * float(cfg.get('exposure_s', 0.0))

  def at(tau):
    return project(cfg, (pts - p0 - vel * tau[:, None]) @ R_CAM)
  tau = np.full(len(pts), half)
  for _ in range(iterations):
    uv, _ = at(tau)
    tau = np.clip(uv[:, 1], 0.0, cfg['height_px'] - 1.0) * line + half
  uv, vis = at(tau)
  blur = at(tau + half)[0] - at(tau - half)[0]
  return uv, tau, blur, vis


def _collect(sim, worlds, seed, n_ticks, seg):
  """Delivered frames `(uv (W, F, L, 2), row_time (W, F, L), blur, visible, p₀ (W, F, 3))` in
  the order of their sample ticks (the rig has no latency, loss or faults)."""
  first, rest = common.segments(sim, sim.default_params(worlds), world_keys(seed, worlds),
                                n_ticks, seg, observe_truth=True)
  parts = [first] + list(rest)
  get = lambda f: np.concatenate([f(o) for o in parts], axis=1)  # noqa: E731
  new = get(lambda o: np.asarray(o['sensor']['dut'].new_data)).astype(bool)
  s = lambda name: get(lambda o: np.asarray(getattr(o['sensor']['dut'].sample, name)))  # noqa
  pos = get(lambda o: np.asarray(o['truth']['dut']['position_m']))
  W = new.shape[0]
  F = int(new.sum(axis=1).min())
  pick = lambda a: np.stack([a[w][new[w]][:F] for w in range(W)])  # noqa: E731
  return (pick(s('uv_px')), pick(s('row_time_s')), pick(s('blur_px')),
          pick(s('visible')).astype(bool), pick(pos))


def run_moving(cfg, perturb, rigs, worlds, seed, duration_s, progress) -> list[Check]:
  """The moving rig's checks (module docstring)."""
  period = float(cfg['period_s'])
  dur = min(duration_s, 2.0)
  xml, doc, pts = moving_rig(cfg, perturb, dur)
  sim = rig_simulation(write_rig(rigs, 'moving', xml, doc))
  progress(f'camera moving rig: {worlds} worlds x {dur:g} s at {SPEED:g} m/s, {len(pts)} '
           'landmarks')
  uv, rt, blur, vis, p0 = _collect(sim, worlds, seed,
                                   *common.segmented(int(math.ceil(dur / sim.dt))))
  uv, rt, blur, vis, p0 = (a[:, SKIP:] for a in (uv, rt, blur, vis, p0))
  vel = SPEED * AXIS
  ref = [[reference(cfg, pts, p0[w, k], vel) for k in range(p0.shape[1])]
         for w in range(p0.shape[0])]
  r_uv, r_tau, r_blur, r_vis = (np.array([[f[i] for f in row] for row in ref])
                                for i in range(4))
  use = r_vis & vis
  res = np.where(use[..., None], uv - r_uv, np.nan)
  n = use.sum(axis=(0, 1))
  mean = np.nanmean(res, axis=(0, 1)) if use.any() else np.full((len(pts), 2), np.nan)
  err = float(np.nanmax(np.abs(mean))) if use.any() else None
  sigma = float(cfg.get('pixel_noise_stddev_px', 0.0))
  tol = K_SIGMA * sigma / math.sqrt(max(int(n.min()), 1)) + 2e-3
  # the size of what the rolling shutter moves: reference pixel at τ* vs at mid-exposure of row 0
  still = np.array([[reference({**cfg, 'shutter': 'global', 'readout_time_s': 0.0}, pts,
                               p0[w, k], vel)[0] for k in range(p0.shape[1])]
                    for w in range(p0.shape[0])])
  shift = float(np.max(np.abs(r_uv - still)[use])) if use.any() else 0.0
  line = (float(cfg.get('readout_time_s', 0.0)) / cfg['height_px']
          if cfg.get('shutter') == 'rolling' else 0.0)
  rt_err = float(np.max(np.abs(rt - r_tau)[use])) if use.any() else None
  rt_tol = 2e-3 * line + 1e-8
  b_err = float(np.max(np.abs(blur - r_blur)[use])) if use.any() else None
  b_tol = 2e-3
  return [
      Check('camera_moving_reprojection', f'max |mean pixel − float64 projection at the row '
            f'time| over {len(pts)} landmarks, camera moving at {SPEED:g} m/s', err, 0.0, tol,
            f'{K_SIGMA:g}·σ_px/√N, N ≥ {int(n.min())} frames, + 2e-3 px (float32); the rolling '
            f'shutter moves the reference by up to {fmt(shift)} px here',
            err is not None and err <= tol),
      Check('camera_moving_row_time', 'max |row_time_s − fixed point τ* = v(τ*)·readout/height '
            '+ exposure/2|', rt_err, 0.0, rt_tol, '2e-3 px of row; τ* converged in float64',
            rt_err is not None and rt_err <= rt_tol),
      Check('camera_moving_blur', 'max |blur_px − (uv(τ* + e/2) − uv(τ* − e/2))|', b_err, 0.0,
            b_tol, 'float64 projection of the moving camera; 2e-3 px (float32)',
            b_err is not None and b_err <= b_tol),
  ]
