"""MJCF on the host: `package://` resolution, MjSpec load and compile with one-line errors, and the
refusal of MJCF timing attributes that MJX ignores silently."""

from __future__ import annotations

import os
import pathlib
import re
import tempfile

import mujoco
import numpy as np

from fibril_mjx.config import paths
from fibril_mjx.errors import ConfigError, FibrilError, did_you_mean, unreadable

_MAX_DEPTH = 16


def _materialize(path: pathlib.Path, packages: dict, made: list, depth: int = 0
                 ) -> pathlib.Path:
  """Returns a path MuJoCo can open for `path`: the file itself, or a rewritten sibling copy in
  which every `package://` URI became an absolute path (recursively for XML files)."""
  if depth > _MAX_DEPTH:
    raise FibrilError(f'{path}: package:// references nest deeper than {_MAX_DEPTH} (a cycle?)')
  text = path.read_text(encoding='utf-8')
  live = re.sub(r'<!--.*?-->', '', text, flags=re.S)  # URIs in comments are not references
  uris = sorted(set(m.group(0) for m in paths.PACKAGE_URI.finditer(live)), key=len,
                reverse=True)
  if not uris:
    return path
  for uri in uris:
    target = paths.resolve_uri(uri, packages, base=path.parent, where=str(path))
    if target.suffix.lower() == '.xml':
      target = _materialize(target, packages, made, depth + 1)
    text = text.replace(uri, str(target))
  # A sibling keeps MuJoCo's relative-path semantics (meshdir, includes) intact.
  for folder in (path.parent, pathlib.Path(tempfile.gettempdir())):
    try:
      fd, name = tempfile.mkstemp(prefix=f'.{path.stem}.fibril-', suffix='.xml', dir=folder)
    except OSError:
      continue
    with os.fdopen(fd, 'w', encoding='utf-8') as f:
      f.write(text)
    made.append(name)
    return pathlib.Path(name)
  raise FibrilError(f'{path}: cannot write a resolved copy (no writable directory)')


def load_spec(model_path: pathlib.Path, packages: dict) -> mujoco.MjSpec:
  """Parses an MJCF file whose references may use `package://` URIs."""
  made: list[str] = []
  if pathlib.Path(model_path).is_file() and pathlib.Path(model_path).stat().st_size == 0:
    raise unreadable(model_path, 'MJCF file', 'empty', 'is model: the right file?')
  try:
    resolved = _materialize(pathlib.Path(model_path), packages, made)
    return mujoco.MjSpec.from_file(str(resolved))
  except UnicodeDecodeError as e:
    raise unreadable(model_path, 'MJCF file', e, 'is model: the right file?') from None
  except ValueError as e:
    msg = ' '.join(str(e).split())
    for name in made:
      msg = msg.replace(name, '<resolved copy>')
    if msg.startswith('XML parse error'):   # not XML at all, or cut short
      msg += '; is it a complete MJCF file?'
    raise FibrilError(f'{model_path}: MuJoCo cannot load the model: {msg}') from None
  finally:
    for name in made:
      try:
        os.unlink(name)
      except OSError:
        pass


def compile_spec(spec: mujoco.MjSpec, model_path) -> mujoco.MjModel:
  try:
    return spec.compile()
  except ValueError as e:
    raise FibrilError(f'{model_path}: MuJoCo cannot compile the model: '
                      f'{" ".join(str(e).split())}') from None


def keyframe_id(m: mujoco.MjModel, name: str | None, file: str) -> int:
  """The id of keyframe `name` (the manifest's `keyframe`), or -1 for None (start at `qpos0`).

  Raises:
    ConfigError: no keyframe of that name (did-you-mean, the model's keyframes listed).
  """
  if name is None:
    return -1
  kid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_KEY, name)
  if kid < 0:
    names = [m.key(i).name for i in range(m.nkey)]
    listed = ', '.join(repr(n) if n else f'#{i} (unnamed)' for i, n in enumerate(names))
    raise ConfigError(file, 'keyframe', 'no keyframe of that name in the model'
                      + did_you_mean(name, [n for n in names if n])
                      + f'; the model\'s keyframes: {listed or "(none)"}', name)
  return kid


def initial_data(m: mujoco.MjModel, keyframe: int = -1, qpos=None, qvel=None
                 ) -> mujoco.MjData:
  """The state every world starts from, forwarded: `mj_resetDataKeyframe` at `keyframe`
  (qpos, qvel, act, ctrl, mocap and time of the `<key>`), or the model's reset state (`qpos0`)
  for -1; `qpos` `(nq,)` / `qvel` `(nv,)` replace the positions / velocities where given (a
  recording's initial state)."""
  d = mujoco.MjData(m)
  if keyframe >= 0:
    mujoco.mj_resetDataKeyframe(m, d, keyframe)
  if qpos is not None:
    d.qpos[:] = qpos
  if qvel is not None:
    d.qvel[:] = qvel
  mujoco.mj_forward(m, d)
  return d


def reject_mjx_ignored(m: mujoco.MjModel, model_path) -> None:
  """MJX silently ignores actuator/sensor `delay`, `nsample`, `interp` and sensor `interval`:
  a model that uses them is rejected, pointing to the component fields that model timing."""
  for i in range(m.nactuator):
    if m.actuator_delay[i] > 0 or m.actuator_history[i, 0] > 0:
      raise FibrilError(
          f'{model_path}: actuator {m.actuator(i).name!r} uses delay/nsample, which MJX ignores '
          'silently; remove it from the MJCF and model the delay with the actuator component\'s '
          'latency_s / command_latency_s (and application_period_s) fields')
  for i in range(m.nsensor):
    if (m.sensor_delay[i] > 0 or m.sensor_history[i, 0] > 0 or
        np.any(m.sensor_interval[i] > 0)):
      raise FibrilError(
          f'{model_path}: sensor {m.sensor(i).name!r} uses delay/nsample/interval, which MJX '
          'ignores silently; remove it from the MJCF and use the sensing component\'s '
          'latency_s, period_s and phase_s fields')
