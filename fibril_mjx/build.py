"""Host-side build: MJCF (with `package://`) → MjSpec → assemblies → overlays → MjModel →
components bound by name → scripts → MJX model, returned as one static `Built`."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import tempfile
from typing import Any

import mujoco
import numpy as np

from fibril_mjx import paths
from fibril_mjx.errors import ConfigError, FibrilError, did_you_mean

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
  try:
    resolved = _materialize(pathlib.Path(model_path), packages, made)
    return mujoco.MjSpec.from_file(str(resolved))
  except ValueError as e:
    msg = ' '.join(str(e).split())
    for name in made:
      msg = msg.replace(name, '<resolved copy>')
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


_SENSOR_NAMES = {
    mujoco.mjtSensor.mjSENS_FRAMEQUAT: 'framequat',
    mujoco.mjtSensor.mjSENS_GYRO: 'gyro',
    mujoco.mjtSensor.mjSENS_ACCELEROMETER: 'accelerometer',
    **{getattr(mujoco.mjtSensor, f'mjSENS_{n.upper()}'): n for n in ('velocimeter', 'rangefinder', 'magnetometer', 'framepos')},
}


@dataclasses.dataclass(frozen=True)
class SensorBinding:
  """A MuJoCo sensor bound to a component field (resolved on the host)."""
  field: str
  name: str
  type: str
  adr: int
  dim: int
  site: str


@dataclasses.dataclass
class BuildContext:
  """What a component sees while it is built: the compiled model and where its config sits.

  Attributes:
    assembly: the resolved `assemblies` entry bound to this component
      (`fibril_mjx.assemblies.ResolvedAssembly`), or None.
    built: the components built before this one, `{id: component}` in manifest order.
    entries: `(id, type)` of every component entry in the manifest, in order.
    vary: manifest fields of this component named for per-world variation (their terms are
      compiled in even at the default value).
  """
  model: mujoco.MjModel
  dt: float
  file: str
  path: str
  assembly: Any = None
  built: dict = dataclasses.field(default_factory=dict)
  entries: tuple = ()
  vary: frozenset = frozenset()

  def sensor(self, field: str, name: str, kind: mujoco.mjtSensor, dim: int) -> SensorBinding:
    m = self.model
    sid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SENSOR, name)
    where = f'{self.path}.{field}'
    if sid < 0:
      names = [m.sensor(i).name for i in range(m.nsensor)]
      raise ConfigError(self.file, where, 'no MuJoCo sensor of that name in the compiled model'
                        + did_you_mean(name, names), name)
    want = _SENSOR_NAMES.get(kind, str(kind))
    if m.sensor_type[sid] != kind:
      got = mujoco.mjtSensor(m.sensor_type[sid]).name.replace('mjSENS_', '').lower()
      raise ConfigError(self.file, where, f'must name a {want} sensor (dim {dim}); '
                        f'{name!r} is a {got} sensor', name)
    if m.sensor_dim[sid] != dim:
      raise ConfigError(self.file, where, f'must name a {want} sensor of dim {dim}; '
                        f'{name!r} has dim {m.sensor_dim[sid]}', name)
    site = ''
    if m.sensor_objtype[sid] == mujoco.mjtObj.mjOBJ_SITE:
      site = m.site(m.sensor_objid[sid]).name
    return SensorBinding(field, name, want, int(m.sensor_adr[sid]), dim, site)


# ---------------------------------------------------------------- manifest → built simulation

DCMOTOR_PARAMS = 'mjcf.dcmotor'   # params key of the dcmotor actuators' parameters


@dataclasses.dataclass(frozen=True, eq=False)
class Built:
  """Everything the host-side build resolves from a manifest: static and hashable.

  Hash and equality come from what the compiled code depends on — the manifest's sha256, the
  built components (themselves hashable by their static fields), the scripts and the dcmotor
  binding — so equal manifests share compiled code.

  Attributes:
    manifest: the parsed manifest.
    mj_model: the compiled MuJoCo model (assemblies and overlays applied).
    physics_model: the model MJX steps (a twin without `dcmotor` actuators, else `mj_model`).
    mx: its MJX model; `data0`: `mjx.Data` after `mj_forward` of the initial state.
    dt: physics timestep (s).
    components: `{id: component}` in manifest order.
    actuator_script, command_script: the manifest's open-loop drives.
    dcmotor: static dcmotor binding, or None.
    assemblies, overlays: resolved assemblies and applied overlays (for the plan).
    vary: `{component id: frozenset of fields}` compiled in for per-world variation.
  """
  manifest: Any
  mj_model: mujoco.MjModel
  physics_model: mujoco.MjModel
  mx: Any
  data0: Any
  dt: float
  components: dict
  actuator_script: Any
  command_script: Any
  dcmotor: Any
  assemblies: dict
  overlays: tuple
  vary: dict

  def _key(self):
    return (self.manifest.sha256, tuple(self.components.items()), self.actuator_script,
            self.command_script, self.dcmotor, tuple(sorted(self.vary.items())))

  def __hash__(self):
    return hash(self._key())

  def __eq__(self, other):
    return isinstance(other, Built) and self._key() == other._key()


def _check_vary(manifest, components: dict, vary: dict) -> dict:
  """`vary` names existing components and per-world (Params) fields."""
  file = str(manifest.path)
  out = {}
  for cid, names in (vary or {}).items():
    if cid not in components:
      raise ConfigError(file, 'vary', 'no component of that id'
                        + did_you_mean(cid, list(components)), cid)
    c = components[cid]
    for name in names:
      if c.param_path(name) is None:
        known = [n for n, _ in c.fields if c.param_path(n) is not None]
        raise ConfigError(file, f'vary.{cid}', f'not a per-world field of {c.type} (static '
                          'config cannot vary per world in one compiled program)'
                          + did_you_mean(name, known), name)
    out[cid] = frozenset(names)
  return out


def build(manifest, vary: dict | None = None) -> Built:
  """Host-side build: MJCF (with `package://`) → MjSpec → assemblies → overlays → compile →
  bind components → scripts → the MJX model.

  Args:
    manifest: a parsed `fibril_mjx.manifest.Manifest`.
    vary: `{component id: [manifest field, ...]}` — per-world fields compiled into the graph
      even when their manifest value is the default (so a per-world value takes effect).
  """
  from fibril_mjx import assemblies, command_script, dcmotor
  from fibril_mjx._mjx import mjx
  from fibril_mjx.components import TYPES, protocol
  from fibril_mjx.manifest import ComponentConfig

  file = str(manifest.path)
  spec = load_spec(manifest.model_path, manifest.packages)
  # Robot geometry and calibration are materialized into the spec before compile (SPEC §3.3,
  # §3.4): assembly gears first, then overlays in manifest order.
  resolved_assemblies = assemblies.apply_assemblies(manifest, spec)
  overlays, overlay_fields = assemblies.apply_overlays(manifest, spec)
  mj_model = compile_spec(spec, manifest.model_path)
  reject_mjx_ignored(mj_model, manifest.model_path)
  dt = float(mj_model.opt.timestep)
  vary = dict(vary or {})
  ids = [e.id for e in manifest.model.components]
  for cid in vary:
    if cid not in ids:
      raise ConfigError(file, 'vary', 'no component of that id' + did_you_mean(cid, ids), cid)
  components = {}
  for i, entry in enumerate(manifest.model.components):
    path = f'components[{i}]'
    if entry.type not in TYPES:
      raise ConfigError(file, f'{path}.type', 'unknown component type'
                        + did_you_mean(entry.type, TYPES) +
                        f'; known types: {", ".join(sorted(TYPES))}', entry.type)
    if entry.id == DCMOTOR_PARAMS:
      raise ConfigError(file, f'{path}.id', 'reserved name', entry.id)
    ctx = BuildContext(mj_model, dt, file, f'{path}.config',
                       assembly=resolved_assemblies.get(entry.id), built=dict(components),
                       entries=tuple((e.id, e.type) for e in manifest.model.components),
                       vary=frozenset(vary.get(entry.id, ())))
    raw = ComponentConfig(entry.config, overlay_fields.get(entry.id, ()))
    component = TYPES[entry.type].build(entry.id, raw, ctx, manifest.catalog)
    protocol.check(component)
    components[entry.id] = component
  vary = _check_vary(manifest, components, vary)
  actuator_script = command_script.build_actuator_script(manifest, mj_model)
  _check_one_driver_per_actuator(manifest, components)
  cmd_script = command_script.build(manifest, components, dt)
  # MJX cannot step dcmotor: step a twin model and evaluate dcmotor in JAX (fibril_mjx.dcmotor).
  physics_model, dc = dcmotor.prepare(mj_model, spec)
  try:
    mx = mjx.put_model(physics_model)
  except NotImplementedError as e:
    raise ConfigError(str(manifest.model_path), 'model',
                      f'MJX cannot step this model: {e}') from None
  d = mujoco.MjData(physics_model)
  mujoco.mj_forward(physics_model, d)
  data0 = mjx.put_data(physics_model, d)
  return Built(manifest, mj_model, physics_model, mx, data0, dt, components, actuator_script,
               cmd_script, dc, resolved_assemblies, tuple(overlays), vary)


def _check_one_driver_per_actuator(manifest, components: dict) -> None:
  """Each MuJoCo actuator is written by one component (or the actuator_script), never two."""
  from fibril_mjx.components import protocol
  file = str(manifest.path)
  owner = {}
  for i, s in enumerate(manifest.model.actuator_script):
    owner[s.actuator] = f'actuator_script[{i}]'
  for i, (cid, c) in enumerate(components.items()):
    if protocol.ACTUATOR not in c.roles:
      continue
    for b in c.bindings:
      if b.name in owner:
        raise ConfigError(file, f'components[{i}].config.{b.field}',
                          f'actuator already driven by {owner[b.name]}; one driver per '
                          'actuator', b.name)
      owner[b.name] = f'component {cid!r}'
