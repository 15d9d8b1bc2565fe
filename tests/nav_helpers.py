"""Shared helpers of the navigation-sensor tests (test_magnetometer/barometer/airspeed/gnss/
rangefinder/faults): a tiny MJCF to bind names against, synthetic per-tick `mjx.Data` stand-ins,
a driver that runs a component's sensing cycle over ticks, and the named-stream draws re-derived
from the SPEC §4 formula (the RNG itself is not under test)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from fibril_mjx.config import paths
from fibril_mjx.builder.build import BuildContext
from fibril_mjx.core.context import ProbeSet
from fibril_mjx.config.manifest import Catalog
from ref_helpers import normals, write_manifest  # noqa: F401  (nh.normals in the tests)

DT = 0.002
WK = jax.random.fold_in(jax.random.PRNGKey(11), np.uint32(3))

# site 0 `s` carries a velocimeter, a gyro and a rangefinder (z axis); site 1 `s2` a second
# velocimeter; actuator `thr` gives a throttle ctrl; `spin` a velocity actuator for a motor.
NAV_XML = """\
<mujoco model="nav">
  <option timestep="0.002"/>
  <asset><material name="m" rgba="1 1 1 1"/></asset>
  <worldbody>
    <geom name="ground" type="plane" size="10 10 0.1" material="m"/>
    <body name="b" pos="0 0 1">
      <freejoint/>
      <geom type="sphere" size="0.05" mass="1" contype="0" conaffinity="0"/>
      <site name="s" zaxis="0 0 -1"/>
      <site name="s2" pos="0.1 0 0"/>
      <body name="wheel">
        <joint name="spin_joint" type="hinge" axis="0 0 1"/>
        <geom type="cylinder" size="0.05 0.01" mass="0.1" contype="0" conaffinity="0"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="thr" site="s" gear="0 0 -1 0 0 0"/>
    <velocity name="spin" joint="spin_joint" kv="0.1"/>
  </actuator>
  <sensor>
    <velocimeter name="vel" site="s"/>
    <gyro name="gyro" site="s"/>
    <rangefinder name="range" site="s"/>
    <velocimeter name="vel2" site="s2"/>
    <accelerometer name="accel" site="s"/>
    <gyro name="gyro2" site="s2"/>
  </sensor>
</mujoco>
"""
VEL, GYRO, RANGE, VEL2 = slice(0, 3), slice(3, 6), 6, slice(7, 10)
NSD = 16


class Data(NamedTuple):
  """A stand-in for `mjx.Data` with the fields the sensors read: `sensordata` holds the MJCF's
  sensors (`NSD`) and then the probes of both sites' poses (`PROBES`: the hidden `framepos` /
  `frame{x,y,z}axis` sensors a built component reads the pose through), filled from
  `site_xpos` / `site_xmat` by `data_seq`."""
  site_xmat: jax.Array    # (2, 3, 3)
  site_xpos: jax.Array    # (2, 3)
  sensordata: jax.Array   # (NSD + probes,)
  ctrl: jax.Array         # (2,)


MODEL = mujoco.MjModel.from_xml_string(NAV_XML)
PROBES = ProbeSet(MODEL)   # one layout shared by every component these tests build
for _site in ('s', 's2'):
  for _kind in ('framepos', 'framexaxis', 'frameyaxis', 'framezaxis'):
    PROBES.request(_kind, 'site', _site, mujoco.mj_name2id(MODEL, mujoco.mjtObj.mjOBJ_SITE,
                                                            _site))


def context(path='components[0].config', built=None, entries=(), vary=()):
  return (BuildContext(MODEL, DT, 'test.yaml', path, built=dict(built or {}),
                       entries=tuple(entries), vary=frozenset(vary), probes=PROBES),
          Catalog([paths.profiles_dir()]))


def _probe_columns(xm, xp, n):
  """The probe block of `sensordata` `(n, PROBES.size)` for site poses `xm`, `xp`."""
  out = np.zeros((n, PROBES.size))
  for p in PROBES.probes.values():
    if p.objtype != 'site':   # (a joint of a motor built beside: no pose to give)
      continue
    i, lo = p.objid, p.adr - NSD
    out[:, lo:lo + 3] = xp[:, i] if p.kind == 'framepos' else xm[:, i, :, 'xyz'.index(p.kind[5])]
  return out


def rot_z(a):
  c, s = np.cos(a), np.sin(a)
  return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def rot_x(a):
  c, s = np.cos(a), np.sin(a)
  return np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


def data_seq(n, xmat=None, xpos=None, sensordata=None, ctrl=None) -> Data:
  """`Data` with a leading `(n,)` tick axis; unspecified fields are identity / zero."""
  xm = np.broadcast_to(np.eye(3), (n, 2, 3, 3)).copy()
  if xmat is not None:
    xm[:, 0] = xmat
    xm[:, 1] = xmat
  xp = np.zeros((n, 2, 3))
  if xpos is not None:
    xp[:, 0] = xpos
  sd = np.zeros((n, NSD))
  if sensordata is not None:
    sd[:] = sensordata
  sd = np.concatenate([sd, _probe_columns(xm, xp, n)], axis=1)
  ct = np.zeros((n, 2))
  if ctrl is not None:
    ct[:, 0] = ctrl
  f = lambda a: jnp.asarray(a, jnp.float32)  # noqa: E731
  return Data(f(xm), f(xp), f(sd), f(ct))


def dues(c, n_ticks):
  """Host-side `(due (T,), n (T,))` of the component's acquisition schedule."""
  due = np.zeros(n_ticks, bool)
  idx = np.zeros(n_ticks, np.int32)
  k = 0
  while True:
    t = c.schedule.tick_of(k)
    if t >= n_ticks:
      break
    due[t], idx[t] = True, k
    k += 1
  return jnp.asarray(due), jnp.asarray(idx)


def _drive(c, p, data, due, idx, env, wk):
  s = c.init(p, wk)

  def body(s, xs):
    d, dn, n, tick, e = xs
    s = c.sense(p, s, d, tick, {'acquisition': (dn, n)}, e)
    return s, (c.output(s), s.faults.health, c.truth(s, d))
  ticks = jnp.arange(due.shape[0], dtype=jnp.int32)
  return jax.lax.scan(body, s, (data, due, idx, ticks, env))


_DRIVE = jax.jit(_drive, static_argnums=0)
_DRIVE_WORLDS = jax.jit(jax.vmap(_drive, in_axes=(None, 0, None, None, None, None, 0)),
                        static_argnums=0)


def drive(c, data: Data, params=None, env=None, wk=WK):
  """Runs `sense` every tick; returns NumPy `(final state, Delivered per tick, health per tick,
  truth per tick)`."""
  n = data.sensordata.shape[0]
  due, idx = dues(c, n)
  p = c.default_params() if params is None else params
  s, (out, health, truth) = _DRIVE(c, p, data, due, idx, env or {}, wk)
  return jax.tree.map(np.asarray, (s, out, health, truth))


def drive_worlds(c, data: Data, n_worlds, params=None, env=None, seed=0):
  """`drive` over `n_worlds` world keys (params broadcast unless given per world)."""
  n = data.sensordata.shape[0]
  due, idx = dues(c, n)
  p = c.default_params() if params is None else params
  p = jax.tree.map(lambda x: jnp.broadcast_to(x, (n_worlds,) + jnp.shape(x)), p) \
      if params is None else params
  keys = jax.vmap(lambda w: jax.random.fold_in(jax.random.PRNGKey(seed), w))(
      jnp.arange(n_worlds))
  s, (out, health, truth) = _DRIVE_WORLDS(c, p, data, due, idx, env or {}, keys)
  return jax.tree.map(np.asarray, (s, out, health, truth))


def delivered(out, field):
  """Values of `field` at the ticks a sample was delivered (one world)."""
  return getattr(out.sample, field)[out.new_data]


def gm_reference(z, phi, sigma):
  """Stationary first-order Gauss–Markov from unit draws `z` `(n, ...)` (float64)."""
  b = np.empty_like(z)
  b[0] = sigma * z[0]
  for k in range(1, len(z)):
    b[k] = phi * b[k - 1] + sigma * np.sqrt(1 - phi ** 2) * z[k]
  return b


def bartlett_sd(phi, k, n):
  """Standard deviation of the lag-k sample autocorrelation of an AR(1) (Bartlett).

  Bartlett: n·var(r_k) ≈ Σ_v ρ_v² + ρ_{v+k}ρ_{v−k} − 4ρ_kρ_vρ_{v−k} + 2ρ_k²ρ_v². With
  ρ_v = φ^|v| the sums are geometric and give (1+φ²)(1−φ^{2k})/(1−φ²) − 2kφ^{2k}; at k = 1
  that is 1 − φ², the variance of the least-squares AR(1) coefficient (as in test_imu.py,
  test_ahrs.py, test_stats.py). A float64 Monte Carlo of the magnetometer, barometer and GNSS
  designs (stationary start, 100 replicates each) gave sd(r_k) within 0.88–1.14 of this and a
  bias under 0.2 of it, so their 5-sd bounds hold."""
  return np.sqrt(((1 + phi ** 2) * (1 - phi ** (2 * k)) / (1 - phi ** 2)
                  - 2 * k * phi ** (2 * k)) / n)


def manifest(tmp_path, components, model_xml=NAV_XML, extra=None):
  """Writes nav.xml and manifest.yaml; returns the manifest path."""
  return write_manifest(tmp_path, model_xml, components, model='nav.xml', **(extra or {}))


def config_error(tmp_path, components):
  """The one-line `FibrilError` message of loading a manifest with these components."""
  import pytest

  import fibril_mjx
  from fibril_mjx.errors import FibrilError
  path = manifest(tmp_path, components)
  with pytest.raises(FibrilError) as info:
    fibril_mjx.load(str(path))
  return path, str(info.value)


def assert_rule(tmp_path, components, field_path, value, rule):
  """Loading fails with a line `file: field_path = value: rule` (value None: no value shown)."""
  path, msg = config_error(tmp_path, components)
  start = f'{path}: {field_path}' + ('' if value is None else f' = {value}') + ': '
  lines = [ln for ln in msg.splitlines() if ln.startswith(start)]
  assert lines and any(rule in ln[len(start):] for ln in lines), msg
