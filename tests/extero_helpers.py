"""Shared helpers of the exteroceptive-sensor tests (camera, lidar, optical flow): a small scene
(ground plane, an occluding box, a sphere, landmark sites, a free rig carrying the sensor
sites), real MuJoCo states through C (`mj_forward`) as `mjx.Data`, and a driver of a
component's sensing cycle over a sequence of those states."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from fibril_mjx.config import paths
from fibril_mjx.physics.mjx import mjx
from fibril_mjx.builder.build import BuildContext
from fibril_mjx.components.sensors.scene import Scene
from fibril_mjx.core.context import ProbeSet
from fibril_mjx.config.manifest import Catalog

DT = 0.002
LANDMARKS = [f'lm{i}' for i in range(24)]


def _landmark_sites():
  r = np.random.default_rng(5)
  pts = np.column_stack([r.uniform(2.0, 8.0, 24), r.uniform(-4.0, 4.0, 24),
                         r.uniform(0.0, 3.0, 24)])
  pts[20] = (-3.0, 0.0, 1.0)          # behind the camera
  pts[21] = (4.0, 0.0, 1.0)           # behind the box (occluded)
  return ''.join(f'    <site name="lm{i}" pos="{x:.4f} {y:.4f} {z:.4f}" size="0.02"/>\n'
                 for i, (x, y, z) in enumerate(pts))


SCENE_XML = f"""\
<mujoco model="extero">
  <option timestep="{DT}" gravity="0 0 0"/>
  <worldbody>
    <geom name="ground" type="plane" size="50 50 0.1" group="0"/>
    <geom name="wall" type="box" pos="2.5 0 1" size="0.1 0.3 0.3" group="1"/>
    <geom name="ball" type="sphere" pos="0 -3 1" size="0.5" group="2"/>
    <geom name="pillar" type="cylinder" pos="-3 2 1" size="0.3 1" group="3"/>
    <geom name="post" type="capsule" pos="0 4 1" size="0.2 0.6" euler="90 0 0" group="4"/>
{_landmark_sites()}    <body name="rig" pos="0 0 1">
      <freejoint/>
      <geom type="box" size="0.05 0.05 0.02" mass="1" contype="0" conaffinity="0"/>
      <site name="cam" pos="0.05 0 0" zaxis="1 0 0"/>
      <site name="lidar" pos="0 0 0.03"/>
      <site name="flow" pos="0 0.02 -0.02" zaxis="0 0 -1"/>
    </body>
  </worldbody>
</mujoco>
"""


def _probed_model():
  """The scene compiled with every probe sensor an exteroceptive component can ask for (each
  site's pose and velocity, each moving geom's pose), as the builder would append them: the
  components built on `context()` read their physics through these."""
  raw = mujoco.MjModel.from_xml_string(SCENE_XML)
  probes = ProbeSet(raw)
  ctx = BuildContext(raw, DT, 'test.yaml', 'components[0].config', probes=probes)
  for i in range(raw.nsite):
    ctx.site_pose(i)
    ctx.site_velocity(i)
  Scene.of(raw, ctx)
  return probes.compile(mujoco.MjSpec.from_string(SCENE_XML)), probes


MODEL, PROBES = _probed_model()


def model():
  return MODEL


def context(m=None, path='components[0].config'):
  m = model() if m is None else m
  return (BuildContext(m, DT, 'test.yaml', path, probes=PROBES if m is MODEL else None),
          Catalog([paths.profiles_dir()]))


def state(m, pos=(0.0, 0.0, 1.0), quat=(1.0, 0.0, 0.0, 0.0), vel=(0, 0, 0), omega=(0, 0, 0)):
  """MjData after `mj_forward` with the rig at `pos`, `quat`, world linear velocity `vel` and
  body-frame angular velocity `omega` (MuJoCo's free-joint convention)."""
  d = mujoco.MjData(m)
  d.qpos[:3], d.qpos[3:7] = pos, quat
  d.qvel[:3], d.qvel[3:6] = vel, omega
  mujoco.mj_forward(m, d)
  return d


def put(m, d):
  return mjx.put_data(m, d)


def stack(m, ds):
  """One `mjx.Data` with a leading tick axis from a list of MjData."""
  xs = [mjx.put_data(m, d) for d in ds]
  return jax.tree.map(lambda *a: jnp.stack(a), *xs)


def site_velocity(m, d, name):
  """`(v, ω)` world frame of a site, from MuJoCo C (`mj_objectVelocity`, float64)."""
  sid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, name)
  res = np.zeros(6)
  mujoco.mj_objectVelocity(m, d, mujoco.mjtObj.mjOBJ_SITE, sid, res, 0)
  return res[3:], res[:3]


def site_pose(m, d, name):
  sid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, name)
  return d.site_xpos[sid].copy(), d.site_xmat[sid].reshape(3, 3).copy()


def c_ray(m, d, pnt, vec, body):
  """MuJoCo C's ray: `(distance, geom id, normal)` (float64)."""
  g = np.zeros(1, np.int32)
  n = np.zeros(3)
  dist = mujoco.mj_ray(m, d, np.asarray(pnt, np.float64), np.asarray(vec, np.float64), None, 1,
                       body, g, n)
  return dist, int(g[0]), n


def random_quat(rng, max_angle):
  ax = rng.normal(size=3)
  ax /= np.linalg.norm(ax)
  a = rng.uniform(-max_angle, max_angle)
  return np.concatenate([[np.cos(a / 2)], np.sin(a / 2) * ax])


def drive(c, data, wk=None):
  """Runs `sense` every tick over a stacked `mjx.Data`; NumPy `(final state, Delivered per tick,
  truth per tick)`."""
  n = data.qpos.shape[0]
  due = np.zeros(n, bool)
  idx = np.zeros(n, np.int32)
  k = 0
  while c.schedule.tick_of(k) < n:
    due[c.schedule.tick_of(k)], idx[c.schedule.tick_of(k)] = True, k
    k += 1
  wk = jax.random.PRNGKey(3) if wk is None else wk
  s, (out, tr) = _DRIVE(c, c.default_params(), data, jnp.asarray(due), jnp.asarray(idx), wk)
  return jax.tree.map(np.asarray, (s, out, tr))


def _drive(c, p, data, due, idx, wk):
  s = c.init(p, wk)

  def body(s, xs):
    d, dn, n, tick = xs
    s = c.sense(p, s, d, tick, {'acquisition': (dn, n)}, {})
    return s, (c.output(s), c.truth(s, d))
  ticks = jnp.arange(due.shape[0], dtype=jnp.int32)
  return jax.lax.scan(body, s, (data, due, idx, ticks))


_DRIVE = jax.jit(_drive, static_argnums=0)


def acquire(c, data, n=0, wk=None):
  """One `acquire` of a component on one `mjx.Data` (jit), NumPy sample."""
  wk = jax.random.PRNGKey(3) if wk is None else wk
  return jax.tree.map(np.asarray, _ACQ(c, c.default_params(), data, n, wk))


def _acq(c, p, data, n, wk):
  s = c.init(p, wk)
  return c.acquire(p, s, data, jnp.int32(0), n)[1]


_ACQ = jax.jit(_acq, static_argnums=0)
