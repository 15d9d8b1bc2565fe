"""Scene geometry and site motion shared by the exteroceptive sensors (`fibril_sim/camera`,
`fibril_sim/lidar`, `fibril_sim/optical_flow`; docs/guides/sensors.md, "Exteroceptive sensors:
camera, lidar, optical flow").

- `Scene`: the static geometry of the compiled model that `mjx.ray` needs (geom types, sizes,
  bodies, groups, materials, meshes), captured once at build, hashable by content. Rays are
  cast against the geom poses of the tick: a geom welded to the world keeps its compiled pose,
  every other geom is read through its probe sensors (`framepos`, `frame{x,y,z}axis` of the
  geom: `geom_xpos` and the columns of `geom_xmat`), so any backend that produces
  `sensordata` serves the rays; geom sizes changed per world (`model_fields`) are *not* seen by
  the rays (the build-time sizes are used).
- `Scene.cast`: `mjx.ray` (distance, geom id; −1 / −1 when nothing is hit), vmappable over
  rays, plus cylinders in closed form (MJX 3.17's ray skips them); geoms with alpha 0 are not
  hit (MJX's rule); height fields are never hit.
- `Scene.normal`: the outward unit surface normal at a hit point, in closed form for planes,
  spheres, capsules, ellipsoids, cylinders and boxes; for meshes and height fields it returns
  the reversed ray direction (normal incidence assumed: stated in each sensor's README section).
- `SiteMotion`: linear and angular velocity (world frame) of a site through its
  `framelinvel` / `frameangvel` probes (MuJoCo's `mj_objectVelocity` with `flg_local = 0`).
- `rotate`: `exp([a]×)·y` (Rodrigues), for poses extrapolated at constant velocity over a
  frame or sweep.
- `ViewFields`, `view_of`, `make_view`: the static fields every one of these sensors has
  (its site, the site's body and root body, the scene, the site's motion), declared and built
  once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import types

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from fibril_mjx.core.context import Probe, SitePose
from fibril_mjx.mechanisms import faults
from fibril_mjx.physics.mjx import mjx

_FIELDS = ('body_weldid', 'geom_bodyid', 'geom_group', 'geom_type', 'geom_matid', 'geom_rgba',
           'geom_size', 'geom_dataid', 'mesh_faceadr', 'mesh_vertadr', 'mesh_face', 'mesh_vert')


@dataclasses.dataclass(frozen=True, eq=False)
class Scene:
  """Static geometry for ray casts (see the module docstring)."""
  ns: types.SimpleNamespace
  digest: str
  moving: tuple = ()    # geom ids not welded to the world
  poses: tuple = ()     # their `SitePose` probes

  @staticmethod
  def of(model: mujoco.MjModel, ctx) -> 'Scene':
    """The scene of `model`; `ctx` (the component's `BuildContext`) gives the probes of the
    geoms that move."""
    arrays = {f: np.array(getattr(model, f)) for f in _FIELDS}
    d = mujoco.MjData(model)
    mujoco.mj_forward(model, d)
    arrays['static_xpos'] = np.array(d.geom_xpos, np.float32)
    arrays['static_xmat'] = np.array(d.geom_xmat, np.float32).reshape(-1, 3, 3)
    weld = model.body_weldid[model.geom_bodyid]
    moving = tuple(int(g) for g in np.flatnonzero((weld != 0) | (model.body_mocapid[weld] >= 0)))
    # a trailing opaque row: `mat_rgba[geom_matid]` with matid −1 stays in bounds
    arrays['mat_rgba'] = np.concatenate([np.array(model.mat_rgba).reshape(-1, 4),
                                         np.ones((1, 4), np.float32)])
    h = hashlib.sha1()
    for k in sorted(arrays):
      h.update(k.encode())
      h.update(np.ascontiguousarray(arrays[k]).tobytes())
    ns = types.SimpleNamespace(**arrays, nmeshface=int(model.nmeshface),
                               nmeshvert=int(model.nmeshvert))
    return Scene(ns, h.hexdigest(), moving, tuple(ctx.geom_pose(g) for g in moving))

  def __hash__(self):
    return hash((self.digest, self.poses))

  def __eq__(self, other):
    return (isinstance(other, Scene) and other.digest == self.digest
            and other.poses == self.poses)

  def geoms(self, data) -> types.SimpleNamespace:
    """`geom_xpos (ngeom, 3)`, `geom_xmat (ngeom, 3, 3)` of the tick: compiled poses for the
    geoms welded to the world, probe readings for the others (what `mjx.ray` reads)."""
    xpos = jnp.asarray(self.ns.static_xpos)
    xmat = jnp.asarray(self.ns.static_xmat)
    if self.moving:
      ids = np.asarray(self.moving)
      xpos = xpos.at[ids].set(jnp.stack([p.pos(data) for p in self.poses]))
      xmat = xmat.at[ids].set(jnp.stack([p.mat(data) for p in self.poses]))
    return types.SimpleNamespace(geom_xpos=xpos, geom_xmat=xmat)

  @property
  def ngeom(self) -> int:
    return int(self.ns.geom_type.shape[0])

  def cast(self, data, pnt, vec, bodyexclude=-1):
    """`(distance, geom id)` of the ray `pnt + s·vec` (`vec` a unit vector; −1 when nothing is
    hit). `bodyexclude`: a static body id or sequence of them. MJX 3.17's `ray` skips
    cylinders; they are intersected here in closed form (same filters: excluded bodies,
    invisible geoms). Height fields are not hit."""
    data = self.geoms(data)
    dist, gid = mjx.ray(self.ns, data, pnt, vec, bodyexclude=bodyexclude)
    ids = self._cylinders(bodyexclude)
    if ids.size == 0:
      return dist, gid
    xmat, xpos = data.geom_xmat[ids], data.geom_xpos[ids]
    size = jnp.asarray(self.ns.geom_size[ids], jnp.float32)
    lp = jnp.einsum('gji,gj->gi', xmat, pnt - xpos)
    lv = jnp.einsum('gji,j->gi', xmat, vec)
    t = jax.vmap(_ray_cylinder)(size[:, 0], size[:, 1], lp, lv)
    k = jnp.argmin(t)
    closer = jnp.isfinite(t[k]) & ((dist < 0) | (t[k] < dist))
    return (jnp.where(closer, t[k], dist),
            jnp.where(closer, jnp.asarray(ids, jnp.int32)[k], gid))

  def _cylinders(self, bodyexclude) -> np.ndarray:
    ns = self.ns
    keep = ns.geom_type == int(mujoco.mjtGeom.mjGEOM_CYLINDER)
    for b in np.atleast_1d(bodyexclude):
      keep &= ns.geom_bodyid != b
    keep &= (ns.geom_matid != -1) | (ns.geom_rgba[:, 3] != 0)
    keep &= (ns.geom_matid == -1) | (ns.mat_rgba[ns.geom_matid, 3] != 0)
    return np.flatnonzero(keep)

  def group_of(self, gid):
    """Geom group (0–5) of a hit geom id (0 for no hit)."""
    return jnp.asarray(np.clip(self.ns.geom_group, 0, 5), jnp.int32)[jnp.maximum(gid, 0)]

  def body_of(self, gid):
    return jnp.asarray(self.ns.geom_bodyid, jnp.int32)[jnp.maximum(gid, 0)]

  def normal(self, data, gid, hit, vec):
    """Outward unit normal (world) of geom `gid` at world point `hit` (see module docstring);
    `-vec` when nothing was hit."""
    g = jnp.maximum(gid, 0)
    data = self.geoms(data)
    xmat = data.geom_xmat[g]
    p = xmat.T @ (hit - data.geom_xpos[g])
    size = jnp.asarray(self.ns.geom_size, jnp.float32)[g]
    gtype = jnp.asarray(self.ns.geom_type, jnp.int32)[g]
    e = lambda i: jnp.eye(3, dtype=p.dtype)[i]  # noqa: E731
    # box: the face whose normalized coordinate is largest
    k = jnp.argmax(jnp.abs(p) / jnp.maximum(size, 1e-9))
    box = jnp.sign(p[k]) * jax.nn.one_hot(k, 3, dtype=p.dtype)
    cap = p - jnp.array([0.0, 0.0, 1.0]) * jnp.clip(p[2], -size[1], size[1])
    ell = p / jnp.maximum(size, 1e-9) ** 2
    rho = jnp.sqrt(p[0] ** 2 + p[1] ** 2)
    on_cap = jnp.abs(p[2]) / jnp.maximum(size[1], 1e-9) >= rho / jnp.maximum(size[0], 1e-9)
    cyl = jnp.where(on_cap, jnp.sign(p[2]) * e(2), jnp.array([p[0], p[1], 0.0]))
    T = mujoco.mjtGeom
    local = jnp.select(
        [gtype == int(t) for t in (T.mjGEOM_PLANE, T.mjGEOM_SPHERE, T.mjGEOM_CAPSULE,
                                   T.mjGEOM_ELLIPSOID, T.mjGEOM_CYLINDER, T.mjGEOM_BOX)],
        [e(2), p, cap, ell, cyl, box], xmat.T @ -vec)
    n = xmat @ (local / jnp.maximum(jnp.linalg.norm(local), 1e-12))
    return jnp.where(gid >= 0, n, -vec)


def _ray_cylinder(r, h, p, v):
  """Smallest t ≥ 0 with p + t·v on the cylinder x² + y² = r², |z| ≤ h (side or caps), or inf."""
  inf = jnp.float32(jnp.inf)
  a = v[0] ** 2 + v[1] ** 2
  b = 2 * (p[0] * v[0] + p[1] * v[1])
  c = p[0] ** 2 + p[1] ** 2 - r ** 2
  disc = b * b - 4 * a * c
  sq = jnp.sqrt(jnp.maximum(disc, 0.0))
  a_s = jnp.where(a > 1e-12, a, 1.0)
  ts = []
  for sgn in (-1.0, 1.0):
    t = (-b + sgn * sq) / (2 * a_s)
    ok = (a > 1e-12) & (disc >= 0) & (t >= 0) & (jnp.abs(p[2] + t * v[2]) <= h)
    ts.append(jnp.where(ok, t, inf))
  vz = jnp.where(jnp.abs(v[2]) > 1e-12, v[2], 1.0)
  for sgn in (-1.0, 1.0):
    t = (sgn * h - p[2]) / vz
    x, y = p[0] + t * v[0], p[1] + t * v[1]
    ok = (jnp.abs(v[2]) > 1e-12) & (t >= 0) & (x * x + y * y <= r * r)
    ts.append(jnp.where(ok, t, inf))
  return jnp.min(jnp.stack(ts))


def site_bodies(model: mujoco.MjModel, site_id: int) -> tuple[int, int]:
  """`(body id, root body id)` of a site (static)."""
  b = int(model.site_bodyid[site_id])
  return b, int(model.body_rootid[b])


@dataclasses.dataclass(frozen=True)
class SiteMotion:
  """A site's pose and velocity probes (`SitePose`, `framelinvel`, `frameangvel`)."""
  pose: SitePose
  linvel: Probe
  angvel: Probe

  @staticmethod
  def of(ctx, site_id: int) -> 'SiteMotion':
    return SiteMotion(ctx.site_pose(site_id), *ctx.site_velocity(site_id))

  def velocity(self, data):
    """`(v, ω)`: linear velocity of the site origin and angular velocity of its body, both in
    the world frame."""
    return self.linvel.read(data), self.angvel.read(data)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ViewFields:
  """The fields of a sensor that looks at the scene from a site, keyword-only (from
  `view_of`): `site_id`, its `body` and `root` body, the `scene` and the site's `motion`. A
  mixin listed before `base.SensorBase` (`class Camera(ViewFields, base.SensorBase)`); the
  sensor declares only its own fields."""
  reads_sensors_only = True
  site_id: int
  body: int
  root: int
  scene: Scene
  motion: SiteMotion


def view_of(ctx, site_id: int) -> dict:
  """The `ViewFields` of site `site_id` (the scene's probes requested before the
  site's)."""
  body, root = site_bodies(ctx.model, site_id)
  return dict(site_id=site_id, body=body, root=root, scene=Scene.of(ctx.model, ctx),
              motion=SiteMotion.of(ctx, site_id))


def make_view(sb, cls, view: dict, **own):
  """`sb.make(cls, **view, **own)` (a `base.SensorBuild`), then its fault plan from the built
  sensor's `neutral()` sample."""
  comp = sb.make(cls, None, **view, **own)
  plan = faults.build_plan(sb.cfg, comp.neutral(), cls.fault_fields, origin=sb.origin)
  return dataclasses.replace(comp, fault_plan=plan)


def rotate(a, y):
  """`exp([a]×)·y`: vector(s) `y (..., 3)` rotated by rotation vector(s) `a (..., 3)`
  (Rodrigues, with series coefficients near θ = 0)."""
  t2 = jnp.sum(a * a, axis=-1, keepdims=True)
  small = t2 < 1e-8
  t = jnp.sqrt(jnp.where(small, 1.0, t2))
  s1 = jnp.where(small, 1.0 - t2 / 6.0, jnp.sin(t) / t)
  s2 = jnp.where(small, 0.5 - t2 / 24.0, (1.0 - jnp.cos(t)) / jnp.where(small, 1.0, t2))
  ay = jnp.cross(a, y)
  return y + s1 * ay + s2 * jnp.cross(a, ay)
