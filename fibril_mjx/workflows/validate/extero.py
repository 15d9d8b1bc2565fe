"""`fibril_sim/optical_flow`, `fibril_sim/lidar` and `fibril_sim/camera` in
`fibril-mjx validate`.

Optical flow: two rigs over a flat textured ground (gravity off, no contacts), the sensor
looking straight down from height h (the middle of its range, at most 1 m), its gyro error
terms removed (the integrated body rate is the rotation rig's reference; not checked here):

| check | rig | compares |
| --- | --- | --- |
| `flow_scale` | translation: a slide joint driven at constant speed v (a stiff velocity servo) | mean of flow_rad / integration_time (x) vs −v/h |
| `flow_noise` | the same | std of flow_rad (x) about each world's mean vs σ = noise_stddev_rad + noise_per_m_rad·h |
| `quality` | the same | delivered quality vs round(255 · illumination · texture · blur factor) |
| `saturation_quality` | rotation: a hinge through the sensor about its x axis, rate ω_pk·sin(2πft), ω_pk = 1.5·max_angular_rate | quality 0 on frames whose rate stays above the limit, > 0 on frames whose rate stays below 0.9 × it |
| `rotation_flow` | the same | flow_rad (y) / integration_time vs the frame's mean rate ω_x (flow = (−ω_y, ω_x) at zero speed) on tracked, unsaturated frames |

`fibril_sim/lidar`: one static rig, the site at h above the ground with its pattern replaced by
a vertical fan of 8 beams from straight down to 20° below the horizon (incidence 0 … 70°,
range h/sin|ε|): `lidar_return_rate` (valid fraction per beam vs the configured return
probability, binomial tolerance), `lidar_range_noise` (std about each world's mean vs
√(σ(d)² + q²/12)) and `lidar_range_bias` (mean vs the geometric range).

`fibril_sim/camera`: one static rig, the camera looking at a 5 × 5 grid of landmark sites 5 m
ahead (on the undistorted rays of pixels spanning 10–90 % of the image) and one behind it:
`camera_reprojection` (mean pixel vs a float64 OpenCV-model projection of the configured
intrinsics and distortion), `camera_pixel_noise`, `camera_row_time` (v·readout/height +
exposure/2) and `camera_visibility`; then a moving rig (`camera_motion`: the camera
on a slide joint, `camera_moving_reprojection`, `camera_moving_row_time` and
`camera_moving_blur` against the float64 rolling-shutter fixed point).

Tolerances: K_SIGMA standard errors of the sample statistics, plus a float32 allowance.
"""

from __future__ import annotations

import math
import textwrap
import warnings

import numpy as np

from fibril_mjx.workflows.validate import camera_motion
from fibril_mjx.workflows.validate.common import (rig_simulation, K_SIGMA, by_sequence, collect,
                                                  finish, fmt, segmented, staged_output,
                                                  write_rig, bench_xml, as_rig, Bench, Check,
                                                  Request, Scene)
from fibril_mjx.components.sensors import optical_flow
from fibril_mjx.core import registry
from fibril_mjx.mechanisms.rng import world_keys

FLOW_TYPE = 'fibril_sim/optical_flow'
FIELDS = ('flow_rad', 'body_rate_rad', 'integration_time_s', 'quality')
# The gyro's error terms are left out of the flow rigs: body_rate_rad is the rotation rig's
# reference rate for the flow (`rotation_flow`).
GYRO_FIELDS = tuple(f.name for f in optical_flow.GYRO.config)
SKIP = 5


def _height(cfg) -> float:
  lo, hi = float(cfg.get('min_range_m', 0.0)), float(cfg['max_range_m'])
  return min(1.0, 0.5 * (lo + hi))


def flow_rig(cfg: dict, overrides: dict, kind: str, rate: float = 0.0, freq: float = 0.0):
  """`(xml, manifest dict)` of the translation (`kind='slide'`, speed `rate` m/s) or the
  rotation rig (`kind='hinge'`, peak rate `rate` rad/s at `freq` Hz)."""
  h = _height(cfg)
  joint = ('<joint name="drive" type="slide" axis="1 0 0"/>' if kind == 'slide' else
           '<joint name="drive" type="hinge" axis="1 0 0"/>')
  dt = min(0.001, float(cfg['period_s']) / 4)
  xml = textwrap.dedent(f"""\
      <mujoco model="fibril_validate_flow_{kind}">
        <option timestep="{dt!r}" gravity="0 0 0" integrator="implicitfast"/>
        <asset><material name="ground" rgba="0.5 0.5 0.5 1"/></asset>
        <worldbody>
          <geom name="ground" type="plane" size="500 500 0.1" material="ground" group="0"/>
          <body name="carriage" pos="0 0 {h!r}">
            {joint}
            <geom type="box" size="0.02 0.02 0.005" mass="1" contype="0" conaffinity="0"
                  rgba="0 0 0 0"/>
            <site name="s_flow" zaxis="0 0 -1"/>
          </body>
        </worldbody>
        <actuator><velocity name="drive" joint="drive" kv="100000"/></actuator>
      </mujoco>
      """)
  c = dict(cfg, **overrides)
  c = {k: v for k, v in c.items() if k != 'faults' and k not in GYRO_FIELDS}
  c['site'] = 's_flow'
  c['latency_s'], c['jitter_s'], c['loss_probability'] = 0.0, 0.0, 0.0
  script = {'actuator': 'drive', 'waveform': 'sine', 'offset': rate if kind == 'slide' else 0.0,
            'amplitude': 0.0 if kind == 'slide' else rate, 'frequency_hz': freq or 1.0}
  doc = {'fibril_manifest': 1, 'model': f'{kind}.xml', 'actuator_script': [script],
         'components': [{'id': 'dut', 'type': FLOW_TYPE, 'config': c}]}
  return xml, doc, h, dt


def _run(sim, worlds, seed, dur, period, fields=FIELDS):
  """`fields` of the rig's `dut` over `dur` s (`round(dur / period)` acquisitions), by
  sequence, and the collected data."""
  n_acq = int(round(dur / period))
  n_ticks, seg = segmented(int(math.ceil((n_acq + 2) * period / sim.dt)))
  data = collect(sim, sim.default_params(worlds), world_keys(seed, worlds), n_ticks, seg,
                 fields)['dut']
  return {f: by_sequence(data, f, n_acq) for f in fields}, data


def _site_x(xml) -> np.ndarray:
  """World direction of the rig site's x axis (MuJoCo's frame from `zaxis`)."""
  import mujoco
  m = mujoco.MjModel.from_xml_string(xml)
  d = mujoco.MjData(m)
  mujoco.mj_kinematics(m, d)
  return d.site_xmat[0].reshape(3, 3)[:, 0].copy()


def _translation_checks(cfg, z, h, v, vx) -> list[Check]:
  """`vx`: the carriage speed along the sensor's x axis (m/s)."""
  flow = z['flow_rad'][:, SKIP:, 0]
  T = z['integration_time_s'][:, SKIP:]
  q = z['quality'][:, SKIP:]
  ok = np.isfinite(flow) & np.isfinite(T) & (T > 0)
  rate = np.where(ok, flow / np.where(ok, T, 1.0), np.nan)
  n = int(ok.sum())
  sigma = float(cfg.get('noise_stddev_rad', 0.0)) + float(cfg.get('noise_per_m_rad', 0.0)) * h
  t_mean = float(np.nanmean(T))
  want = -vx / h
  meas = float(np.nanmean(rate))
  tol = K_SIGMA * sigma / t_mean / math.sqrt(max(n, 1)) + 1e-4 * abs(want) + 1e-6
  res = flow - np.nanmean(flow, axis=1, keepdims=True)
  dof = n - flow.shape[0]
  std = float(np.sqrt(np.nansum(res ** 2) / max(dof, 1)))
  tol_s = K_SIGMA * sigma / math.sqrt(2 * max(dof, 1)) + 1e-6
  ill = float(cfg.get('illumination', 1.0))
  tex = float((cfg.get('group_texture') or [1.0] * 6)[0])
  blur = 1.0
  if float(cfg.get('exposure_s', 0.0)) > 0:
    beta = abs(want) * float(cfg['exposure_s']) * cfg['resolution_px'] / math.radians(
        cfg['fov_deg'])
    blur = 1.0 / (1.0 + (beta / float(cfg.get('blur_half_quality_px', 1.0))) ** 2)
  q_want = round(255.0 * ill * tex * blur)
  q_meas = q[np.isfinite(q)]
  return [
      Check('flow_scale', f'mean flow rate (x), translation at {v:g} m/s, {h:g} m above ground',
            meas, want, tol, f'−v/h; {K_SIGMA:g}·σ/(T·√N), N = {n} frames, + 1e-4 relative '
            '(float32)', abs(meas - want) <= tol),
      Check('flow_noise', 'std of flow_rad (x) about each world\'s mean', std, sigma, tol_s,
            f'σ = noise_stddev_rad + noise_per_m_rad·h; {K_SIGMA:g}·σ/√(2N), N = {dof}',
            abs(std - sigma) <= tol_s if sigma > 0 else std <= 1e-6),
      Check('quality', 'delivered quality (translation rig)', [float(q_meas.min()),
                                                               float(q_meas.max())],
            q_want, 1, 'round(255·illumination·texture·1/(1 + (β/blur_half_quality_px)²)), '
            'β = |ḟ|·exposure_s·resolution_px/fov; ±1 for rounding',
            bool(np.all(np.abs(q_meas - q_want) <= 1))),
  ]


def _rotation_checks(cfg, z, data, dt, w_pk, freq, period) -> list[Check]:
  limit = float(cfg['max_angular_rate_rad_s'])
  q = z['quality'][:, SKIP:]
  T = z['integration_time_s'][:, SKIP:]
  gyro = z['body_rate_rad'][:, SKIP:, 0]
  flow = z['flow_rad'][:, SKIP:, 1]
  # each frame's ticks from the integration times; the commanded rate over them, one tick of
  # margin either side (the servo and the sensor's view of it lag by about a tick)
  del data
  ticks_per = np.round(T / dt)
  end = np.round(np.cumsum(np.nan_to_num(z['integration_time_s']), axis=1)[:, SKIP:] / dt) - 1
  above, below = [], []
  for w in range(q.shape[0]):
    for k in range(q.shape[1]):
      if not np.isfinite(q[w, k]):
        continue
      idx = np.arange(end[w, k] - ticks_per[w, k], end[w, k] + 2)
      r = np.abs(w_pk * np.sin(2 * math.pi * freq * idx * dt))
      if r.min() > 1.1 * limit:
        above.append(q[w, k])
      elif r.max() < 0.9 * limit:
        below.append((q[w, k], flow[w, k] / T[w, k], gyro[w, k] / T[w, k]))
  above = np.array(above)
  ok_a = above.size > 0 and bool(np.all(above == 0))
  qb = np.array([b[0] for b in below])
  ok_b = qb.size > 0 and bool(np.all(qb > 0))
  sat = float(cfg['max_flow_rate_rad_s'])
  sel = [b for b in below if b[0] > 0 and abs(b[2]) < 0.95 * sat]
  f = np.array([b[1] for b in sel])
  g = np.array([b[2] for b in sel])
  sigma = float(cfg.get('noise_stddev_rad', 0.0)) + float(cfg.get('noise_per_m_rad', 0.0)) * \
      _height(cfg)
  err = f - g
  tol = K_SIGMA * sigma / period + 1e-3 * np.abs(g) + 1e-4
  return [
      Check('saturation_quality', f'quality on frames above {1.1 * limit:g} rad/s / below '
            f'{0.9 * limit:g} rad/s (rotation rig, peak {w_pk:g} rad/s)',
            {'above_max': float(above.max()) if above.size else None,
             'below_min': float(qb.min()) if qb.size else None},
            {'above': 0, 'below': '> 0'}, 0,
            f'{above.size} frames above, {qb.size} below the configured max_angular_rate_rad_s',
            ok_a and ok_b),
      Check('rotation_flow', 'flow rate (y) − body rate (x) on tracked frames below saturation',
            float(np.max(np.abs(err))) if err.size else None, 0.0,
            fmt(float(np.max(tol))) if err.size else None,
            f'flow = (−ω_y, ω_x) at zero speed; per frame {K_SIGMA:g}·σ/T + 1e-3 relative',
            err.size > 0 and bool(np.all(np.abs(err) <= tol))),
  ]


def run_flow(req: Request) -> dict:
  """`validate` for `fibril_sim/optical_flow`: the translation and rotation rigs."""
  cfg, worlds = req.cfg, req.worlds
  period = float(cfg['period_s'])
  dur = min(req.static_duration_s, 20.0)
  with staged_output(req.out) as tmp:
    rigs = tmp / 'rigs'
    h = _height(cfg)
    v = 0.5 * float(cfg['max_flow_rate_rad_s']) * h
    xml, doc, h, dt = flow_rig(cfg, req.perturb, 'slide', v)
    sim = rig_simulation(write_rig(rigs, 'slide', xml, doc))
    req.progress(f'translation rig: {worlds} worlds x {dur:g} s at {v:g} m/s, {h:g} m')
    z, _ = _run(sim, worlds, req.seed, dur, period)
    checks = _translation_checks(cfg, z, h, v, v * float(_site_x(xml)[0]))
    w_pk = 1.5 * float(cfg['max_angular_rate_rad_s'])
    freq = w_pk / (2 * math.pi * 0.3)       # ±0.3 rad of tilt: the ground stays in range
    xml, doc, _, dt = flow_rig(cfg, req.perturb, 'hinge', w_pk, freq)
    sim = rig_simulation(write_rig(rigs, 'hinge', xml, doc))
    req.progress(f'rotation rig: {worlds} worlds x {min(dur, 5.0):g} s, peak {w_pk:g} rad/s')
    z, data = _run(sim, worlds, req.seed + 1, min(dur, 5.0), period)
    checks += _rotation_checks(cfg, z, data, dt, w_pk, freq, period)
    return finish(tmp, req, checks, duration_s=dur)


def _static_rig(req: Request, tmp, xml, doc, dur, fields, what: str) -> dict:
  """`fields` of the `dut` of the static rig `(xml, doc)` (written to `tmp/rigs/static.*`) over
  `dur` s, by sequence; `what` names the rig and its acquisitions in the progress line."""
  period = float(req.cfg['period_s'])
  sim = rig_simulation(write_rig(tmp / 'rigs', 'static', xml, doc))
  req.progress(what.format(worlds=req.worlds, n=round(dur / period)))
  return _run(sim, req.worlds, req.seed, dur, period, fields)[0]


def _quietly(checks, *args) -> list[Check]:
  """`checks(*args)` without NumPy's empty-slice warnings (a beam that never returns, a
  landmark never seen, has no mean)."""
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', RuntimeWarning)
    return checks(*args)


# ----------------------------------------------------------------------------- lidar

LIDAR_TYPE = 'fibril_sim/lidar'
LIDAR_BEAMS = 8
LIDAR_EL = (-90.0, -20.0)     # elevation fan in the vertical plane: incidence 0 … 70 deg


def lidar_rig(cfg: dict, overrides: dict):
  """Static rig: the lidar site at height h above a ground plane (geom group 0), its beam
  pattern replaced by a fan of `LIDAR_BEAMS` elevations in `LIDAR_EL` (incidence 90° − |ε|,
  range h/sin|ε|); sweep, transport and faults removed. Returns `(xml, manifest, h)`."""
  lo = float(cfg.get('min_range_m', 0.0))
  h = max(1.0, 1.5 * lo)
  dt = min(0.002, float(cfg['period_s']) / 2)
  xml = bench_xml('fibril_validate_lidar_static', dt, '<site name="s_lidar"/>',
                  integrator=None, gravity=False,
                  bench=Bench(f'0 0 {h!r}', '0.02 0.02 0.01', ' rgba="0 0 0 0"'),
                  scene=Scene(asset='<asset><material name="ground" rgba="0.5 0.5 0.5 1"/></asset>',
                              ground='<geom name="ground" type="plane" size="500 500 0.1" '
                                     'material="ground" group="0"/>'))
  c = dict(cfg, **overrides)
  c = {k: v for k, v in c.items() if k != 'faults'}
  c.update(site='s_lidar', horizontal_samples=1, horizontal_min_deg=0.0, horizontal_max_deg=0.0,
           vertical_samples=LIDAR_BEAMS, vertical_min_deg=LIDAR_EL[0],
           vertical_max_deg=LIDAR_EL[1], sweep_time_s=0.0, latency_s=0.0, jitter_s=0.0,
           loss_probability=0.0)
  doc = {'fibril_manifest': 1, 'model': 'static.xml',
         'components': [{'id': 'dut', 'type': LIDAR_TYPE, 'config': c}]}
  return xml, doc, h


def _lidar_checks(cfg, r, ok, h) -> list[Check]:
  """Per beam: range std about each world's mean and mean − geometric range over valid
  samples; valid fraction vs the configured return probability."""
  el = np.radians(np.linspace(*LIDAR_EL, LIDAR_BEAMS))
  d = h / np.sin(-el)
  cos = np.sin(-el)
  g = lambda k, v=0.0: float(cfg.get(k, v))  # noqa: E731
  sigma = g('noise_stddev_m') + g('noise_fraction') * d
  q = g('resolution_m')
  expected = np.sqrt(sigma ** 2 + q * q / 12)
  p = np.full(LIDAR_BEAMS, 1.0 - g('dropout_probability'))
  refl = float((cfg.get('group_reflectivity') or [1.0] * 6)[0])
  if refl != 1.0 or g('reference_range_m') > 0:
    s = cos * refl
    if g('reference_range_m') > 0:
      s = s * (g('reference_range_m') / d) ** 2
    p = p * np.minimum(1.0, s)
  p = np.where(cos >= math.cos(math.radians(g('max_incidence_deg', 90.0))) - 1e-9, p, 0.0)
  margin = 4 * expected + q
  clear = (d - margin > g('min_range_m')) & (d + margin < float(cfg['max_range_m']))
  p_lim = np.where(d > float(cfg['max_range_m']), 0.0, p)
  n = ok.shape[0] * ok.shape[1]
  frac = ok.reshape(-1, LIDAR_BEAMS).mean(axis=0)
  tol_p = K_SIGMA * np.sqrt(p_lim * (1 - p_lim) / n) + 1e-9
  sel = clear | (p_lim == 0)
  ok_p = bool(np.all(np.abs(frac - p_lim)[sel] <= tol_p[sel]))
  rv = np.where(ok, r, np.nan)
  res = rv - np.nanmean(rv, axis=1, keepdims=True)
  nv = np.sum(np.isfinite(res), axis=(0, 1))
  dof = np.maximum(nv - ok.shape[0], 1)
  std = np.sqrt(np.nansum(res ** 2, axis=(0, 1)) / dof)
  tol_s = K_SIGMA * expected / np.sqrt(2 * dof)
  use = clear & (nv > 10 * ok.shape[0])
  quant = np.all(sigma < 0.5 * q) and q > 0
  ok_s = None if quant or not use.any() else bool(np.all(np.abs(std - expected)[use]
                                                          <= tol_s[use]))
  mean = np.nanmean(rv, axis=(0, 1))
  tol_m = K_SIGMA * expected / np.sqrt(np.maximum(nv, 1)) + (0.5 * q if quant else 0) + 1e-5 * d
  ok_m = bool(np.all(np.abs(mean - d)[use] <= tol_m[use])) if use.any() else None
  inc = np.degrees(np.arccos(cos))
  return [
      Check('lidar_return_rate', f'valid fraction per beam at incidence {fmt(inc)} deg, '
            f'range {fmt(d)} m', frac, p_lim, tol_p,
            f'(1 − dropout)·min(1, ρ_0·cos θ·(r_ref/d)²), 0 beyond max_incidence_deg / range; '
            f'{K_SIGMA:g}·√(P(1−P)/N), N = {n} scans (beams within 4σ of a range limit skipped)',
            ok_p),
      Check('lidar_range_noise', 'std of range − per-world mean per beam', std, expected, tol_s,
            f'√(σ² + q²/12), σ = noise_stddev_m + noise_fraction·d; {K_SIGMA:g}·σ/√(2N)', ok_s,
            note='quantization-dominated: not resolvable' if quant else ''),
      Check('lidar_range_bias', 'mean range per beam vs the geometric range h/sin|ε|', mean, d,
            tol_m, f'{K_SIGMA:g}·σ/√N (+ q/2 when quantization-dominated) + float32', ok_m),
  ]


def run_lidar(req: Request) -> dict:
  """`validate` for `fibril_sim/lidar`: the static fan rig."""
  with staged_output(req.out) as tmp:
    xml, doc, h = lidar_rig(req.cfg, req.perturb)
    z = _static_rig(req, tmp, xml, doc, req.static_duration_s, ('range_m', 'beam_valid'),
                    f'lidar static fan rig: {{worlds}} worlds x {{n}} scans, {h:g} m above ground')
    r, ok = z['range_m'], z['beam_valid']
    keep = np.all(np.isfinite(ok), axis=-1)
    r, ok = r[:, keep.all(axis=0)], ok[:, keep.all(axis=0)].astype(bool)
    return finish(tmp, req, _quietly(_lidar_checks, req.cfg, r, ok, h))


# ---------------------------------------------------------------------------- camera

CAMERA_TYPE = 'fibril_sim/camera'
GRID = 5                      # GRID x GRID landmarks spanning 10 … 90 % of the image
DEPTH = 5.0                   # m, the landmark plane in front of the camera


def camera_rig(cfg: dict, overrides: dict):
  """Static rig: the camera at the origin looking along world +x (OpenCV axes: image x = −y,
  image y = −z), a GRID × GRID plane of landmark sites DEPTH m ahead placed on the undistorted
  pinhole rays of a pixel grid, one landmark behind the camera. Returns `(xml, manifest,
  landmark world points (n, 3))`."""
  fx, fy, cx, cy = (float(cfg[k]) for k in ('fx_px', 'fy_px', 'cx_px', 'cy_px'))
  us = np.linspace(0.1, 0.9, GRID) * cfg['width_px']
  vs = np.linspace(0.1, 0.9, GRID) * cfg['height_px']
  pts = [(DEPTH, -(u - cx) / fx * DEPTH, -(v - cy) / fy * DEPTH) for v in vs for u in us]
  pts.append((-DEPTH, 0.0, 0.0))
  sites = ''.join(f'    <site name="lm{i}" pos="{float(x)!r} {float(y)!r} {float(z)!r}"/>\n'
                  for i, (x, y, z) in enumerate(pts))
  dt = min(0.002, float(cfg['period_s']) / 2)
  xml = bench_xml('fibril_validate_camera_static', dt,
                  '<site name="s_cam" xyaxes="0 -1 0 0 0 -1"/>', integrator=None, gravity=False,
                  bench=Bench('', '0.02 0.02 0.02', ' material="m"'),
                  scene=Scene(asset='<asset><material name="m" rgba="0.5 0.5 0.5 1"/></asset>',
                              world=sites))
  c = dict(cfg, **overrides)
  c = {k: v for k, v in c.items() if k != 'faults'}
  c.update(site='s_cam', landmarks=[f'lm{i}' for i in range(len(pts))], latency_s=0.0,
           jitter_s=0.0, loss_probability=0.0)
  doc = {'fibril_manifest': 1, 'model': 'static.xml',
         'components': [{'id': 'dut', 'type': CAMERA_TYPE, 'config': c}]}
  return xml, doc, np.array(pts)


def _camera_reference(cfg, pts):
  """Float64 pixel coordinates and in-front flags of the rig's landmarks (OpenCV's model):
  the rig's landmarks in the camera frame through `camera_motion.project`."""
  return camera_motion.project(cfg, np.stack([-pts[:, 1], -pts[:, 2], pts[:, 0]], -1))


def _camera_checks(cfg, uv, vis, rt, pts) -> list[Check]:
  ref, want_vis = _camera_reference(cfg, pts)
  sigma = float(cfg.get('pixel_noise_stddev_px', 0.0))
  front = want_vis
  m = uv[:, :, front]                                   # (W, F, L, 2)
  n = int(np.isfinite(m[..., 0]).sum() / max(front.sum(), 1))
  mean = np.nanmean(m, axis=(0, 1))
  err = np.max(np.abs(mean - ref[front]))
  tol = K_SIGMA * sigma / math.sqrt(max(n, 1)) + 2e-3
  res = m - np.nanmean(m, axis=1, keepdims=True)
  dof = max(int(np.isfinite(res).sum()) - m.shape[0] * m.shape[2] * 2, 1)
  std = float(np.sqrt(np.nansum(res ** 2) / dof))
  tol_s = K_SIGMA * sigma / math.sqrt(2 * dof) + 1e-4
  rolling = cfg.get('shutter') == 'rolling'
  line = float(cfg.get('readout_time_s', 0.0)) / cfg['height_px'] if rolling else 0.0
  rt_want = np.clip(ref[front, 1], 0, cfg['height_px'] - 1) * line + \
      0.5 * float(cfg.get('exposure_s', 0.0))
  rt_err = float(np.nanmax(np.abs(rt[:, :, front] - rt_want)))
  rt_tol = 2e-3 * line + 1e-8
  got_vis = np.all(vis, axis=(0, 1)) if vis.size else vis
  return [
      Check('camera_reprojection', f'max |mean pixel − float64 projection| over {front.sum()} '
            'landmarks (OpenCV pinhole + Brown–Conrady)', err, 0.0, tol,
            f'{K_SIGMA:g}·σ_px/√N, N = {n} frames, + 2e-3 px (float32)', err <= tol),
      Check('camera_pixel_noise', 'std of pixel coordinates about each world\'s mean', std, sigma,
            tol_s, f'{K_SIGMA:g}·σ/√(2N), N = {dof}',
            abs(std - sigma) <= tol_s if sigma > 0 else std <= 1e-4),
      Check('camera_row_time', 'max |row_time_s − (v·readout/height + exposure/2)|', rt_err, 0.0,
            rt_tol, 'the mid-exposure time of the landmark\'s row (static rig); 2e-3 px of row',
            rt_err <= rt_tol),
      Check('camera_visibility', 'landmarks visible in every frame vs the float64 reference',
            int(got_vis.sum()), int(want_vis.sum()), 0,
            'in front, in the image, distortion monotonic (one landmark behind the camera)',
            bool(np.array_equal(got_vis, want_vis))),
  ]


def run_camera(req: Request) -> dict:
  """`validate` for `fibril_sim/camera`: the static landmark-grid rig, then the moving rig."""
  with staged_output(req.out) as tmp:
    xml, doc, pts = camera_rig(req.cfg, req.perturb)
    z = _static_rig(req, tmp, xml, doc, min(req.static_duration_s, 20.0),
                    ('uv_px', 'visible', 'row_time_s'),
                    'camera static grid rig: {worlds} worlds x {n} frames, '
                    f'{len(pts)} landmarks')
    keep = np.all(np.isfinite(z['visible']), axis=(0, 2))
    vis = z['visible'][:, keep].astype(bool)
    checks = _quietly(_camera_checks, req.cfg, z['uv_px'][:, keep], vis,
                      z['row_time_s'][:, keep], pts)
    checks += camera_motion.run_moving(req.cfg, req.perturb, tmp / 'rigs', req.worlds,
                                       req.seed + 1, req.static_duration_s, req.progress)
    return finish(tmp, req, checks)


# The rigs of these types (validate finds this module by walking its package).
registry.register(FLOW_TYPE, validation_rig=as_rig(run_flow))
registry.register(LIDAR_TYPE, validation_rig=as_rig(run_lidar))
registry.register(CAMERA_TYPE, validation_rig=as_rig(run_camera))
