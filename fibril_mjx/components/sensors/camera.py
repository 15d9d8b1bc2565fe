"""`fibril_sim/camera` — camera geometry and timing without images (docs/guides/sensors.md,
"Exteroceptive sensors: camera, lidar, optical flow": intrinsics, distortion, rolling/global
shutter, exposure, frame rate, latency, motion blur, dropped frames; "for navigation tests
geometry and timestamps matter more than the looks of the image").

Frames: the camera frame is the frame of the bound site, in OpenCV's convention — optical axis
along the site's +z, image x (columns, u) along the site's +x, image y (rows, v) along its +y.
A frame is acquired at each instant of the schedule (`period_s`, `phase_s`); the frame's
sample tick t_k is the start of exposure of row 0.

Per landmark (a named MuJoCo site at world point X) and frame, with camera position p, rotation
R (site axes as columns), velocity v and angular rate ω of the site at t_k, the camera pose at
τ seconds after t_k is extrapolated at constant velocity:

    p(τ) = p + v·τ,    R(τ) = exp([ω]×·τ)·R,    x_c(τ) = R(τ)ᵀ·(X − p(τ))
    x' = x_c/z_c, y' = y_c/z_c, r² = x'² + y'²                    (OpenCV's model, `distortion`
    x'' = x'(1 + k1 r² + k2 r⁴ + k3 r⁶) + 2 p1 x'y' + p2 (r² + 2x'²)  = [k1, k2, p1, p2, k3])
    y'' = y'(1 + k1 r² + k2 r⁴ + k3 r⁶) + p1 (r² + 2y'²) + 2 p2 x'y'
    u = fx·x'' + cx,  v = fy·y'' + cy                                                 (px)

Shutter: row r (continuous row coordinate v) is exposed over
[r·ℓ, r·ℓ + exposure_s] after t_k, ℓ = readout_time_s / height_px (rolling; global: ℓ = 0);
the landmark is imaged at the mid-exposure time of the row it lands on, τ = v·ℓ + exposure_s/2,
a fixed point solved by `rolling_iterations` substitutions starting from the pose at
τ = exposure_s/2 (each contracts by |dv/dτ|·ℓ, e.g. 1e-2 for 300 px/s at ℓ = 30 µs).
`row_time_s` is that τ (add the frame's `sample_tick`·dt for the absolute time); outside the
image the row is clipped to [0, height_px − 1].

Motion blur: `blur_px` = (u, v)(τ + exposure_s/2) − (u, v)(τ − exposure_s/2), the image-space
motion of the landmark during its row's exposure (0 without exposure time).

Visibility (`visible`): in front (z_c > `min_depth_m`), inside the image (−0.5 ≤ u ≤ W − 0.5,
−0.5 ≤ v ≤ H − 0.5), where the radial distortion is still monotonic
(1 + 3k1 r² + 5k2 r⁴ + 7k3 r⁶ > 0; beyond it OpenCV's model folds points back into the image),
and not occluded: `mjx.ray` from p toward X (the camera's own body excluded) hits nothing
closer than |X − p| − `occlusion_margin_m` (geoms of the landmark's own body, unless it is the
world body, do not occlude it). The occlusion ray uses the geometry and pose at t_k, not the
extrapolated pose. Pixel noise (`pixel_noise_stddev_px`, stream `noise`) is white per
coordinate. Dropped frames: `loss_probability` (transport) or `dropout` faults. Behind the
camera u, v are NaN.
"""

from __future__ import annotations

import dataclasses
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pydantic

from fibril_mjx import error_models as em
from fibril_mjx.mechanisms import host
from fibril_mjx.mechanisms import faults
from fibril_mjx.core.context import BuildContext
from fibril_mjx.components import base
from fibril_mjx.components.base import NonNeg, Positive
from fibril_mjx.components.sensors.scene import ViewFields, make_view, rotate, view_of
from fibril_mjx.errors import ConfigError, ConfigErrors, did_you_mean

TYPE = 'fibril_sim/camera'
SAMPLE_TYPE = 'fibril_sim/camera_landmarks/v1'
# The error model of the image coordinates: white pixel noise per coordinate (one draw per
# landmark and axis). Visibility, blur and dropped frames are the camera's own.
ERRORS = em.chain(em.white_noise('pixel_noise_stddev_px', shape=None))
SOURCES = ERRORS.streams + ('delivery_jitter', 'delivery_loss')


class _OwnConfig(faults.DeviceConfig):
  """The camera's own manifest fields (its error model adds the rest)."""
  site: str
  landmarks: tuple[str, ...] = pydantic.Field(min_length=1)
  width_px: int = pydantic.Field(gt=0)
  height_px: int = pydantic.Field(gt=0)
  fx_px: Positive
  fy_px: Positive
  cx_px: float
  cy_px: float
  distortion: tuple[float, float, float, float, float] = (0.0, 0.0, 0.0, 0.0, 0.0)
  shutter: Literal['global', 'rolling'] = 'global'
  readout_time_s: NonNeg = 0.0
  exposure_s: NonNeg = 0.0
  min_depth_m: Positive = 0.01
  occlusion: bool = True
  occlusion_margin_m: NonNeg = 0.01
  rolling_iterations: int = pydantic.Field(4, ge=1, le=20)


class CameraConfigModel(em.with_errors(_OwnConfig, ERRORS)):
  """Validated manifest config of `fibril_sim/camera` (px, s, m): its own fields and its error
  model's."""


class Params(NamedTuple):
  """Per-world parameters (config names; `distortion` `(5,)`), faults."""
  # the sensor's own
  fx_px: jax.Array
  fy_px: jax.Array
  cx_px: jax.Array
  cy_px: jax.Array
  distortion: jax.Array
  readout_time_s: jax.Array
  exposure_s: jax.Array
  min_depth_m: jax.Array
  # white noise
  pixel_noise_stddev_px: jax.Array
  faults: tuple  # `faults.FaultParams` per manifest `faults` entry


class Sample(NamedTuple):
  """`fibril_sim/camera_landmarks/v1` (L landmarks, in manifest order).

  Attributes:
    uv_px: (L, 2) pixel coordinates (u column, v row; OpenCV's pixel-centre convention), NaN
      behind the camera.
    visible: (L,) bool — in front, in the image, distortion monotonic, not occluded.
    depth_m: (L,) z of the landmark in the camera frame at its row time.
    row_time_s: (L,) mid-exposure time of the landmark's row after the frame's sample tick.
    blur_px: (L, 2) image-space motion during the row's exposure.
    health: int32 (`fibril_mjx.mechanisms.faults`).
  """
  uv_px: jax.Array
  visible: jax.Array
  depth_m: jax.Array
  row_time_s: jax.Array
  blur_px: jax.Array
  health: jax.Array


State = base.SensorState   # no error-model state: streams, queue, held, faults


def project(x_c, fx, fy, cx, cy, dist, distorted: bool):
  """OpenCV's pinhole + Brown–Conrady projection of camera-frame points `(..., 3)`:
  `(uv (..., 2), monotonic (...))`."""
  z = x_c[..., 2]
  zs = jnp.where(jnp.abs(z) > 1e-9, z, 1e-9)
  x, y = x_c[..., 0] / zs, x_c[..., 1] / zs
  mono = jnp.ones_like(z, bool)
  if distorted:
    k1, k2, p1, p2, k3 = (dist[i] for i in range(5))
    r2 = x * x + y * y
    radial = 1 + r2 * (k1 + r2 * (k2 + r2 * k3))
    x, y = (x * radial + 2 * p1 * x * y + p2 * (r2 + 2 * x * x),
            y * radial + p1 * (r2 + 2 * y * y) + 2 * p2 * x * y)
    mono = 1 + r2 * (3 * k1 + r2 * (5 * k2 + r2 * 7 * k3)) > 0
  return jnp.stack([fx * x + cx, fy * y + cy], -1), mono


@dataclasses.dataclass(frozen=True)
class Camera(ViewFields, base.SensorBase):
  """A built `fibril_sim/camera` (static, hashable; the fields of `base.SensorBase` and
  `ViewFields`)."""
  landmark_ids: tuple
  landmark_bodies: tuple
  landmarks: tuple    # framepos probes of the landmark sites

  type = TYPE
  sample_type = SAMPLE_TYPE
  params_type, state_type = Params, State
  errors = ERRORS
  always_used = ('fx_px', 'fy_px', 'cx_px', 'cy_px', 'min_depth_m')

  @property
  def rolling(self) -> bool:
    return self.cfg.shutter == 'rolling'

  def neutral(self):
    n = len(self.landmark_ids)
    z = host.zeros((n,))
    return Sample(host.zeros((n, 2)), host.zeros((n,), bool), z, z, host.zeros((n, 2)),
                  host.array(faults.HEALTHY, np.int32))

  def init(self, p: Params, world_key) -> State:
    return self.init_state(State, p, world_key, self.neutral())

  def _landmarks(self, data):
    return jnp.stack([pr.read(data) for pr in self.landmarks])

  def camera_points(self, data, tau, moving: bool):
    """Landmarks in the camera frame at τ `(L,)` after the tick: `(L, 3)`."""
    p, R = self.motion.pose.pos(data), self.motion.pose.mat(data)
    X = self._landmarks(data)
    if not moving:
      return (X - p) @ R
    v, w = self.motion.velocity(data)
    t = tau[:, None]
    # R(τ)ᵀ y = Rᵀ exp(−[ω]τ) y
    return rotate(-w * t, X - p - v * t) @ R

  def acquire(self, p: Params, s: State, data, tick, n):
    del tick
    c = self.cfg
    L = len(self.landmark_ids)
    distorted = self._on('distortion')
    exposed = self._on('exposure_s')
    moving = self.rolling or exposed
    half = 0.5 * p.exposure_s if exposed else jnp.float32(0.0)
    proj = lambda xc: project(xc, p.fx_px, p.fy_px, p.cx_px, p.cy_px, p.distortion,  # noqa
                              distorted)
    tau = jnp.full((L,), half, jnp.float32)
    line = p.readout_time_s / c.height_px if self.rolling else None
    row_of = lambda uv: jnp.clip(uv[:, 1], 0.0, c.height_px - 1.0)  # noqa: E731
    xc = self.camera_points(data, tau, moving)
    uv, mono = proj(xc)
    if self.rolling:
      for _ in range(c.rolling_iterations):
        tau = row_of(uv) * line + half
        xc = self.camera_points(data, tau, moving)
        uv, mono = proj(xc)
    z = xc[:, 2]
    front = z > p.min_depth_m
    inside = ((uv[:, 0] >= -0.5) & (uv[:, 0] <= c.width_px - 0.5) & (uv[:, 1] >= -0.5)
              & (uv[:, 1] <= c.height_px - 0.5))
    visible = front & inside & mono
    if c.occlusion:
      visible = visible & ~self.occluded(data)
    blur = jnp.zeros((L, 2), jnp.float32)
    if exposed:
      a, _ = proj(self.camera_points(data, tau - half, True))
      b, _ = proj(self.camera_points(data, tau + half, True))
      blur = b - a
    _, uv, _ = ERRORS.apply(p, {}, uv, self.error_ctx(s.streams, n))
    uv = jnp.where(front[:, None], uv, jnp.nan)
    sample = Sample(uv.astype(jnp.float32), visible, z.astype(jnp.float32),
                    jnp.asarray(tau, jnp.float32), blur.astype(jnp.float32),
                    jnp.int32(faults.HEALTHY))
    return s, sample

  def occluded(self, data):
    """(L,) a geom lies between the camera and the landmark (ray at the tick's geometry)."""
    p = self.motion.pose.pos(data)
    X = self._landmarks(data)
    d = X - p
    dist = jnp.linalg.norm(d, axis=-1)
    u = d / jnp.maximum(dist, 1e-9)[:, None]
    hit, gid = jax.vmap(lambda vec: self.scene.cast(data, p, vec, self.body))(u)
    own = (self.scene.body_of(gid) == jnp.asarray(self.landmark_bodies)) & (
        jnp.asarray(self.landmark_bodies) != 0)
    return (hit >= 0) & (hit < dist - self.cfg.occlusion_margin_m) & ~own

  def truth(self, s: State, data) -> dict:
    """Camera site position (m) and rotation (site axes as columns), landmark positions (m),
    all of this tick's `mjx.Data`."""
    return {'position_m': self.motion.pose.pos(data),
            'rotation': self.motion.pose.mat(data),
            'landmarks_m': self._landmarks(data),
            'health': s.faults.health}

  def describe(self) -> list[str]:
    c = self.cfg
    shutter = (f'rolling, readout {c.readout_time_s:g} s ({c.readout_time_s / c.height_px:.3g} '
               's per row)' if self.rolling else 'global')
    return self.describe_errors([
        f'camera: site {c.site!r} (optical axis +z), {c.width_px}x{c.height_px} px, '
        f'f = ({c.fx_px:g}, {c.fy_px:g}) px, c = ({c.cx_px:g}, {c.cy_px:g}) px; shutter '
        f'{shutter}; exposure {c.exposure_s:g} s',
        f'landmarks ({len(c.landmarks)}): {", ".join(c.landmarks)}; occlusion '
        + ('ray test' if c.occlusion else 'off')],
        ('distortion', 'exposure_s'))


def bind_sites(ctx, names, file, path) -> list[int]:
  m = ctx.model
  ids, errors = [], []
  known = [m.site(i).name for i in range(m.nsite)]
  for i, name in enumerate(names):
    sid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, name)
    if sid < 0:
      errors.append(ConfigError(file, f'{path}[{i}]', 'no MuJoCo site of that name in the '
                                'compiled model' + did_you_mean(name, known), name))
    ids.append(int(sid))
  if errors:
    raise ConfigErrors(errors)
  return ids


def build(cid: str, raw, ctx: BuildContext, catalog) -> Camera:
  sb = base.SensorBuild(CameraConfigModel, TYPE, cid, raw, ctx, catalog)
  cfg = sb.cfg
  if cfg.shutter == 'rolling':
    base.check(cfg.readout_time_s > 0, *sb.origin('readout_time_s'),
               'must be > 0 with shutter: rolling', cfg.readout_time_s)
  else:
    base.check(cfg.readout_time_s == 0, *sb.origin('readout_time_s'),
               'must be 0 with shutter: global (set shutter: rolling)', cfg.readout_time_s)
  base.check(cfg.readout_time_s + cfg.exposure_s <= cfg.period_s, *sb.origin('exposure_s'),
             f'readout_time_s + exposure_s must be ≤ period_s = {cfg.period_s:g} (one frame '
             'per period)', cfg.exposure_s)
  sid = faults.bind_site(ctx, cfg.site, sb.origin)
  file, path = sb.origin('landmarks')
  lm = bind_sites(ctx, cfg.landmarks, file, path)
  view = view_of(ctx, sid)   # the scene's and the site's probes before the landmarks'
  return make_view(sb, Camera, view, landmark_ids=tuple(lm),
                   landmark_bodies=tuple(int(ctx.model.site_bodyid[i]) for i in lm),
                   landmarks=tuple(ctx.site_position(i) for i in lm))


CONFIG_MODEL = CameraConfigModel

# The registration: this module is the type (found by the builder walking components/).
from fibril_mjx.core import registry  # noqa: E402
registry.register(TYPE, build=build, config_model=CONFIG_MODEL)
