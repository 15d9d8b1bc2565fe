"""SimulationManifest (SPEC §3.1) and profile catalog (SPEC §3.2): parsing and layering."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import pathlib
from typing import Any, Literal, Optional

import pydantic

from fibril_mjx.config import paths
from fibril_mjx.errors import ConfigError, FibrilError, did_you_mean
from fibril_mjx.config.validation import Strict, load_yaml, validate


class ComponentEntry(Strict):
  id: str = pydantic.Field(min_length=1)
  type: str
  config: dict[str, Any] = {}


class ScriptEntry(Strict):
  """Open-loop test-rig drive: writes `ctrl` of a MuJoCo actuator directly (no device model).

  `ctrl(t) = offset + amplitude · sin(2π·frequency_hz·t + phase_rad)` (`waveform: sine`) or
  `offset + amplitude · sign(sin(...))` (`waveform: square`).
  """
  actuator: str
  waveform: Literal['sine', 'square'] = 'sine'
  amplitude: float = 0.0
  frequency_hz: float = pydantic.Field(0.0, ge=0)
  phase_rad: float = 0.0
  offset: float = 0.0


class TransmissionModel(Strict):
  """`assemblies[].transmission` (SPEC §3.3); per-type rules are checked in `assemblies`."""
  type: Literal['gear_rotary', 'wheel', 'pulley']
  ratio: Optional[float] = None
  radius: Optional[float] = None


class AssemblyModel(Strict):
  """A transmission bound to one motor / motion_motor component (SPEC §3.3)."""
  id: str = pydantic.Field(min_length=1)
  component: str
  transmission: TransmissionModel
  actuator_count: int = pydantic.Field(1, ge=1)


class OverlayRef(Strict):
  """`parameter_overlays[]`: a calibration overlay file, relative to the manifest (SPEC §3.4)."""
  file: str


class CommandScriptEntry(Strict):
  """Built-in open-loop command trace of one actuator component (demos, `fibril-mjx run`).

  From `start_s` on, a command is issued at every instant of `period_s` (default: every tick):
  `value(t) = offset + amplitude · w(2π·frequency_hz·t + phase_rad)` with `w = sin`
  (`waveform: sine`), `sign(sin)` (`square`) or 1 with amplitude 0 (`constant`: `offset`).
  `kind` is a command kind the component accepts (`fibril_sim/motor`: position, velocity,
  effort, duty, trajectory; `fibril_sim/scalar_actuator`: value; `fibril_sim/motion_motor`:
  motion, where the waveform is the position reference, its time derivative the velocity
  reference, and `kp`, `kd`, `effort_ff` are constants).
  """
  component: str
  kind: Literal['position', 'velocity', 'effort', 'duty', 'trajectory', 'value', 'motion']
  waveform: Literal['sine', 'square', 'constant'] = 'sine'
  amplitude: float = 0.0
  frequency_hz: float = pydantic.Field(0.0, ge=0)
  phase_rad: float = 0.0
  offset: float = 0.0
  period_s: Optional[float] = pydantic.Field(None, gt=0)
  start_s: float = pydantic.Field(0.0, ge=0)
  kp: Optional[float] = None
  kd: Optional[float] = None
  effort_ff: Optional[float] = None


class ManifestModel(Strict):
  """A SimulationManifest (SPEC §3.1). `keyframe`: the name of one of the model's `<key>`s;
  every world starts from it (qpos, qvel, act, ctrl, mocap, as `mj_resetDataKeyframe`) instead
  of from `qpos0`."""
  fibril_manifest: Literal[1]
  model: str
  keyframe: Optional[str] = pydantic.Field(None, min_length=1)
  packages: dict[str, str] = {}
  profile_paths: list[str] = []
  assemblies: list[AssemblyModel] = []
  parameter_overlays: list[OverlayRef] = []
  actuator_script: list[ScriptEntry] = []
  command_script: list[CommandScriptEntry] = []
  components: list[ComponentEntry] = pydantic.Field(default_factory=list)


class ProfileModel(Strict):
  id: str
  kind: Literal['device', 'empirical', 'transport']
  component_types: list[str] = pydantic.Field(min_length=1)
  provenance: dict[str, Any]
  fields: dict[str, Any]


LAYERS = ('device', 'empirical', 'transport')


@dataclasses.dataclass(frozen=True)
class Profile:
  id: str
  kind: str
  component_types: tuple[str, ...]
  provenance: dict
  fields: dict
  file: pathlib.Path

  def __hash__(self):
    return hash((self.id, str(self.file)))


@dataclasses.dataclass(frozen=True)
class FieldValue:
  """A resolved config field and the layer it came from."""
  value: Any
  layer: str   # 'default' | 'device' | 'empirical' | 'transport' | 'config' | 'overlay' | 'assembly'
  #              | 'override' (`load(..., overrides=)`, the last layer)
  source: str          # profile id, manifest or overlay file
  file: str
  path: str


# Installed-unit calibration that an empirical profile must never hold (SPEC §3.2): a fixed
# bias, a scale (factor) or a mounting correction (misalignment), as a field name ending in one
# of these words (`angular_velocity_bias`, or `bias` inside a nested group). Stochastic terms
# (`..._bias_turn_on_stddev`, `yaw_rate_bias_stddev_rad_s`) end otherwise and are allowed.
CALIBRATION_WORDS = ('bias', 'scale', 'misalignment', 'mounting')


def check_empirical_fields(pid: str, fields: dict, file: pathlib.Path, prefix: str = '') -> None:
  """Raises ConfigError when empirical profile `pid` holds fixed bias, scale or mounting."""
  for key, value in fields.items():
    path = f'{prefix}{key}'
    if isinstance(value, dict):
      check_empirical_fields(pid, value, file, f'{path}.')
    elif str(key).split('_')[-1] in CALIBRATION_WORDS:
      raise ConfigError(str(file), f'fields.{path}',
                        f'empirical profile {pid!r} holds {path!r}, a fixed bias, scale or '
                        'mounting correction: empirical profiles hold zero-mean stochastic '
                        'residuals only; installed-unit calibration belongs to the consuming '
                        'project (a parameter_overlays entry or the instance config), '
                        'SPEC §3.2', value)


# Profile files read by this process, by (path, modification time, size): a manifest read
# parses and validates each of the ~20 built-in profiles once, not at every read.
_READ: dict = {}


def _read_profile(file: pathlib.Path) -> Profile:
  st = file.stat()
  key = (str(file.resolve()), st.st_mtime_ns, st.st_size)
  if key not in _READ:
    m = validate(ProfileModel, load_yaml(file), file=str(file))
    if m.kind == 'empirical':
      check_empirical_fields(m.id, m.fields, file)
    _READ[key] = Profile(m.id, m.kind, tuple(m.component_types), m.provenance, m.fields, file)
  p = _READ[key]   # each catalog its own copy of the values (nothing shared is mutable)
  return dataclasses.replace(p, provenance=copy.deepcopy(p.provenance),
                             fields=copy.deepcopy(p.fields), file=file)


class Catalog:
  """Profiles by id, from the built-in catalog and the manifest's `profile_paths`."""

  def __init__(self, dirs: list[pathlib.Path]):
    self.profiles: dict[str, Profile] = {}
    for d in dirs:
      for file in sorted(d.glob('*.yaml')) + sorted(d.glob('*.yml')):
        prof = _read_profile(file)
        if prof.id in self.profiles:
          raise FibrilError(f'{file}: id = {prof.id!r}: profile id already defined in '
                            f'{self.profiles[prof.id].file}')
        self.profiles[prof.id] = prof

  def get(self, pid: str, kind: str, component_type: str, *, file: str, path: str) -> Profile:
    p = self.profiles.get(pid)
    if p is None or p.kind != kind or component_type not in p.component_types:
      avail = sorted(q.id for q in self.profiles.values()
                     if q.kind == kind and component_type in q.component_types)
      why = 'unknown profile' if p is None else (
          f'profile {pid!r} is of kind {p.kind!r}' if p.kind != kind else
          f'profile {pid!r} is not for {component_type}')
      raise ConfigError(file, path, f'{why}; available {kind} profiles for {component_type}: '
                        f'{", ".join(avail) if avail else "(none)"}', pid)
    return p


def layer_config(component_type: str, raw: dict, *, catalog: Catalog, file: str,
                 path: str, known_fields: set[str]) -> dict[str, FieldValue]:
  """Resolves device → empirical → transport → instance config (SPEC §3.2).

  Args:
    component_type: e.g. `fibril_sim/ahrs`.
    raw: the instance `config` mapping (may contain `profiles`).
    catalog: the profile catalog.
    file, path: where `raw` sits (`manifest.yaml`, `components[0].config`).
    known_fields: the component's config fields (for unknown-key errors in profiles).

  Returns:
    Field name → `FieldValue`, without `profiles`.

  Raises:
    ConfigError: unknown profile, a field set by two profile layers, unknown field.
  """
  selected = raw.get('profiles') or {}
  if not isinstance(selected, dict):
    raise ConfigError(file, f'{path}.profiles', 'must be a mapping of layer to profile id',
                      selected)
  for layer in selected:
    if layer not in LAYERS:
      raise ConfigError(file, f'{path}.profiles.{layer}',
                        'unknown profile layer' + did_you_mean(layer, LAYERS) +
                        f'; layers: {", ".join(LAYERS)}')
  out: dict[str, FieldValue] = {}
  for layer in LAYERS:
    pid = selected.get(layer)
    if pid is None:
      continue
    if not isinstance(pid, str):
      raise ConfigError(file, f'{path}.profiles.{layer}', 'must be a profile id (a string)', pid)
    prof = catalog.get(pid, layer, component_type, file=file, path=f'{path}.profiles.{layer}')
    for key, value in prof.fields.items():
      if key not in known_fields:
        raise ConfigError(str(prof.file), f'fields.{key}', f'unknown field for {component_type}'
                          + did_you_mean(key, known_fields))
      if key in out:
        prev = out[key]
        raise ConfigError(str(prof.file), f'fields.{key}',
                          f'set by both {prev.layer} profile {prev.source!r} and {layer} '
                          f'profile {pid!r}; a field may come from one profile layer only '
                          '(override it in the instance config instead)', value)
      out[key] = FieldValue(value, layer, pid, str(prof.file), f'fields.{key}')
  for key, value in raw.items():
    if key == 'profiles':
      continue
    out[key] = FieldValue(value, 'config', 'manifest', file, f'{path}.{key}')
  for key, fv in overlay_fields(raw):
    if key not in known_fields:
      raise ConfigError(fv.file, fv.path.rsplit('.', 1)[0] + '.field',
                        f'unknown field for {component_type}' + did_you_mean(key, known_fields),
                        key)
    out[key] = fv
  return out


class ComponentConfig(dict):
  """A component's instance `config` mapping plus the calibration-overlay values that apply
  after it (SPEC §3.4: overlays apply in order after profiles and the instance config).

  Attributes:
    overlays: `((field, FieldValue with layer 'overlay'), ...)` in application order.
  """

  def __init__(self, raw: dict | None = None, overlays=()):
    super().__init__(raw or {})
    self.overlays = tuple(overlays)


def overlay_fields(raw) -> tuple:
  """`((field, FieldValue), ...)` of the overlays carried by a `ComponentConfig` (else ())."""
  return getattr(raw, 'overlays', ())


@dataclasses.dataclass(frozen=True)
class Manifest:
  """A parsed manifest with its resolved paths."""
  path: pathlib.Path
  model: ManifestModel
  model_path: pathlib.Path
  packages: dict[str, pathlib.Path]
  catalog: Catalog
  sha256: str
  # `load(..., overrides=)`: `{'components': [...], 'mjcf': [...]}` entries as in an overlay
  # file, applied after the overlays (validated where overlays are, `assemblies.apply_overlays`)
  overrides: Any = None

  def __hash__(self):
    return hash(self.sha256)


def read_manifest(path: str | pathlib.Path, overrides: Any = None) -> Manifest:
  """Reads and validates a manifest file (top level only; components validate in `build`).

  `overrides` (optional) is kept on the manifest and applied as the last layer (SPEC §8).
  """
  path = pathlib.Path(path)
  if not path.is_file():
    raise FibrilError(f'{path}: manifest not found')
  data = load_yaml(path)
  m = validate(ManifestModel, data, file=str(path))
  base = path.resolve().parent
  packages = paths.builtin_packages()
  for name, root in m.packages.items():
    if name in packages:
      raise ConfigError(str(path), f'packages.{name}', 'a built-in package of that name exists',
                        root)
    rootp = (base / root).resolve()
    if not rootp.is_dir():
      raise ConfigError(str(path), f'packages.{name}', f'directory not found ({rootp})', root)
    packages[name] = rootp
  model_path = paths.resolve_uri(m.model, packages, base=base, where=f'{path}: model')
  dirs = [paths.profiles_dir()]
  for i, p in enumerate(m.profile_paths):
    d = (base / p).resolve()
    if not d.is_dir():
      raise ConfigError(str(path), f'profile_paths[{i}]', f'directory not found ({d})', p)
    dirs.append(d)
  catalog = Catalog(dirs)
  ids = [c.id for c in m.components]
  for i, cid in enumerate(ids):
    if cid in ids[:i]:
      raise ConfigError(str(path), f'components[{i}].id', 'component ids must be unique', cid)
  digest = hashlib.sha256(path.read_bytes()).hexdigest()
  return Manifest(path, m, model_path, packages, catalog, digest, copy.deepcopy(overrides))
