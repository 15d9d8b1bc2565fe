"""Helpers shared by test files across layers, written once: bitwise pytree equality, the
named-stream normal draws re-derived from the SPEC §4 formula (the RNG itself is not under
test), a writer of a manifest next to its MJCF, and IMU recordings made by MuJoCo C."""

from __future__ import annotations

import pathlib
import zlib

import jax
import mujoco
import numpy as np
import yaml

from fibril_mjx.io import recording


def tree_equal(a, b):
  """Asserts two pytrees have the same structure and bitwise equal leaves."""
  la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
  assert len(la) == len(lb) and jax.tree.structure(a) == jax.tree.structure(b)
  for x, y in zip(la, lb):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def normals(world_key, cid, source, n, dim=None, shared=False):
  """Draws 0..n-1 of the stream `source` of component `cid` (or of the shared stream `cid`),
  float64 `(n,)` or `(n, dim)` (`dim` an int or a shape tuple), from the SPEC §4 formula
  `normal(fold_in(fold_in(fold_in(world_key, crc32(cid)), crc32(source)), i))`."""
  return stream_draws(stream_key(world_key, cid, source, shared), n,
                      () if dim is None else (dim,) if isinstance(dim, int) else dim)


def stream_key(world_key, cid, source, shared=False):
  """The key of stream `source` of component `cid` (of the shared stream `cid` when `shared`):
  `fold_in(fold_in(world_key, crc32(cid)), crc32(source))`, SPEC §4."""
  name = ('shared:' + cid) if shared else cid
  return jax.random.fold_in(jax.random.fold_in(world_key, np.uint32(zlib.crc32(name.encode()))),
                            np.uint32(zlib.crc32(source.encode())))


def stream_draws(stream_key, n, shape=()):
  """Draws 0..n-1 of one stream, `normal(fold_in(stream_key, i), shape)`, float64
  `(n, *shape)`."""
  return np.stack([np.asarray(jax.random.normal(jax.random.fold_in(stream_key, np.uint32(i)),
                                                tuple(shape)), np.float64) for i in range(n)])


def write_manifest(tmp: pathlib.Path, xml: str, components, *, model: str = 'model.xml',
                   name: str = 'manifest.yaml', **top) -> pathlib.Path:
  """Writes the MJCF `xml` as `tmp/model` and a manifest `tmp/name` binding it, with
  `components` and any other top-level fields `top` (e.g. `command_script=[...]`); returns the
  manifest's path."""
  tmp = pathlib.Path(tmp)
  tmp.mkdir(parents=True, exist_ok=True)
  (tmp / model).write_text(xml)
  doc = {'fibril_manifest': 1, 'model': model, **top, 'components': list(components)}
  path = tmp / name
  path.write_text(yaml.safe_dump(doc, sort_keys=False))
  return path


def c_imu_samples(m, d, *, every: int, n_ticks: int, ctrl=None):
  """MuJoCo C from the state in `d`: `mj_forward` at every tick k = 0 … n_ticks (after setting
  `d.ctrl = ctrl(k · timestep)` when given), then `mj_step`; at every `every`-th tick the gyro
  and accelerometer (`sensordata[0:3]`, `[3:6]`). Returns `(ticks (S,), gyro (S, 3),
  accel (S, 3))`, float64, no noise."""
  ticks, gyro, accel = [], [], []
  for k in range(n_ticks + 1):
    if ctrl is not None:
      d.ctrl[:] = ctrl(k * m.opt.timestep)
    mujoco.mj_forward(m, d)
    if k % every == 0:
      ticks.append(k)
      gyro.append(d.sensordata[0:3].copy())
      accel.append(d.sensordata[3:6].copy())
    mujoco.mj_step(m, d)
  return np.asarray(ticks), np.asarray(gyro), np.asarray(accel)


def imu_recording(gyro, accel, sample_time_s, arrival_time_s, initial: dict):
  """A recording of component `imu` (float32 samples; `initial`: `{'qpos', 'qvel'}`)."""
  return recording.Recording(
      {'imu': {'angular_velocity': np.asarray(gyro, np.float32),
               'linear_acceleration': np.asarray(accel, np.float32),
               'sample_time_s': sample_time_s, 'arrival_time_s': arrival_time_s}},
      initial=initial, meta={'source': 'MuJoCo C mj_forward at each stamp + NumPy noise (tests)'})


def per_id(built, state, axis: int = 0):
  """`state` (one world, or a batch with `axis=1`) with its components and clocks per
  component id, a group's clock repeated for each member: what the same manifest holds with
  every component a group of one (`groups.unpack`; the clocks have no world axis)."""
  from fibril_mjx.core import command_script, groups
  clocks = {cid: state.clocks[g.key] for g in built.groups for cid in g.ids}
  clocks[command_script.KEY] = state.clocks[command_script.KEY]
  return state._replace(components=groups.unpack(built, state.components, axis), clocks=clocks)
