"""Assemblies (SPEC §3.3) and parameter overlays (SPEC §3.4), applied to the MjSpec before compile.

An assembly declares the robot-specific transmission of one actuator component once: its
resolved gear is written into every MuJoCo actuator channel the component binds (the config
fields its type registers as `assembly_channels`, `fibril_mjx.core.registry`; a type without
them cannot be bound), and a wheel / pulley radius becomes the component's logical scale
(`logical_units_per_joint_unit = radius`: logical position in metres of travel).
`actuator_count` declares how many identical motors the aggregate MJCF actuator stands for
(per-motor feedback current = aggregate force / N × `feedback_current_per_force`).

An overlay file (installed-unit calibration, e.g. written by tuning) sets MjSpec attributes
(`mjcf:`) and component config fields (`components:`); overlays apply in manifest order after
assemblies (MJCF) and after profiles and instance config (components). The nominal MJCF file is
never rewritten.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

import mujoco
import numpy as np
import pydantic

from fibril_mjx.errors import ConfigError, did_you_mean
from fibril_mjx.config.manifest import FieldValue, Manifest
from fibril_mjx.config.validation import Strict, load_yaml, validate


@dataclasses.dataclass(frozen=True)
class ResolvedAssembly:
  """An assembly after validation, as components and the plan see it.

  Attributes:
    id, component: the assembly id and the component it binds.
    type: `gear_rotary`, `wheel` or `pulley`.
    gear: the resolved gear written into every bound channel (= ratio).
    radius: wheel / pulley radius, or None.
    logical_scale: logical units per joint unit derived here (radius), or None.
    actuator_count: motors the aggregate actuator stands for.
    channels: MuJoCo actuator names whose gear was written.
    file, path: where it was declared (`manifest.yaml`, `assemblies[0]`).
  """
  id: str
  component: str
  type: str
  gear: float
  radius: float | None
  logical_scale: float | None
  actuator_count: int
  channels: tuple[str, ...]
  file: str
  path: str

  def describe(self) -> str:
    geo = f'ratio {self.gear:g}' + (f', radius {self.radius:g}' if self.radius else '')
    scale = (f'logical scale {self.logical_scale:g} (radius)' if self.logical_scale is not None
             else 'logical scale from the component')
    return (f'{self.id}: {self.type} ({geo}) -> component {self.component}; resolved gear '
            f'{self.gear:g} written to {", ".join(self.channels) or "(no channel)"}; {scale}; '
            f'actuator count {self.actuator_count}')


def _finite_nonzero(x) -> bool:
  return x is not None and math.isfinite(x) and x != 0


def apply_assemblies(manifest: Manifest, spec: mujoco.MjSpec,
                     bindable: dict[str, tuple]) -> dict[str, ResolvedAssembly]:
  """Validates `assemblies` and writes each resolved gear into the spec's actuators;
  `bindable` `{component type: its config fields naming the actuators an assembly drives}`,
  the types that register `assembly_channels` (`fibril_mjx.core.registry`).

  Returns:
    `{component id: ResolvedAssembly}`.

  Raises:
    ConfigError: one line naming the manifest, the field path, the value and the rule.
  """
  file = str(manifest.path)
  comps = {c.id: (i, c) for i, c in enumerate(manifest.model.components)}
  out: dict[str, ResolvedAssembly] = {}
  ids: set[str] = set()
  for i, a in enumerate(manifest.model.assemblies):
    path = f'assemblies[{i}]'
    if a.id in ids:
      raise ConfigError(file, f'{path}.id', 'assembly ids must be unique', a.id)
    ids.add(a.id)
    if a.component not in comps:
      raise ConfigError(file, f'{path}.component', 'no component of that id'
                        + did_you_mean(a.component, comps), a.component)
    j, entry = comps[a.component]
    fields = bindable.get(entry.type)
    if fields is None:
      raise ConfigError(file, f'{path}.component', f'assemblies bind {" or ".join(bindable)} '
                        f'components; {a.component!r} is a {entry.type}', a.component)
    if a.component in out:
      raise ConfigError(file, f'{path}.component', f'already bound by {out[a.component].path} '
                        f'({out[a.component].id!r}); one assembly per component', a.component)
    t = a.transmission
    tpath = f'{path}.transmission'
    if t.type == 'gear_rotary':
      if t.ratio is None:
        raise ConfigError(file, f'{tpath}.ratio', 'required field is missing (gear_rotary)')
      if t.radius is not None:
        raise ConfigError(file, f'{tpath}.radius', 'a gear_rotary transmission has no radius '
                          '(use type wheel or pulley for a radius)', t.radius)
    else:
      if t.radius is None:
        raise ConfigError(file, f'{tpath}.radius', f'required field is missing ({t.type})')
      if not t.radius > 0:
        raise ConfigError(file, f'{tpath}.radius', 'must be > 0', t.radius)
    ratio = 1.0 if t.ratio is None else t.ratio
    if not _finite_nonzero(ratio):
      raise ConfigError(file, f'{tpath}.ratio', 'must be finite and non-zero', ratio)
    channels = []
    for field in fields:
      name = (entry.config or {}).get(field)
      if not isinstance(name, str):
        continue  # the component reports the missing / bad field when it is built
      act = spec.actuator(name)
      if act is None:
        continue  # likewise: "no MuJoCo actuator of that name"
      gear = np.asarray(act.gear, dtype=float)
      if gear[0] != 1.0 or np.any(gear[1:] != 0):
        raise ConfigError(file, tpath, f'actuator {name!r} already sets gear '
                          f'{" ".join(f"{g:g}" for g in gear)} in the MJCF; the transmission is '
                          'declared once: remove gear from the MJCF actuator (or this assembly)',
                          t.model_dump(exclude_none=True))
      act.gear[0] = ratio
      channels.append(name)
    scale = t.radius if t.type in ('wheel', 'pulley') else None
    out[a.component] = ResolvedAssembly(a.id, a.component, t.type, float(ratio),
                                        None if t.radius is None else float(t.radius),
                                        None if scale is None else float(scale),
                                        int(a.actuator_count), tuple(channels), file, path)
  return out


# ----------------------------------------------------------------------------------- overlays

_PLURAL = {'body': 'bodies', 'joint': 'joints', 'geom': 'geoms', 'site': 'sites',
           'actuator': 'actuators', 'sensor': 'sensors', 'tendon': 'tendons',
           'equality': 'equalities'}


class OverlayMjcf(Strict):
  element: Literal['body', 'joint', 'geom', 'site', 'actuator', 'sensor', 'tendon', 'equality']
  name: str
  attribute: str
  value: Any


class OverlayComponentField(Strict):
  component: str
  field: str
  value: Any


class OverlayModel(Strict):
  fibril_overlay: Literal[1]
  id: str = pydantic.Field(min_length=1)
  provenance: dict[str, Any] = {}
  mjcf: list[OverlayMjcf] = []
  components: list[OverlayComponentField] = []


@dataclasses.dataclass(frozen=True)
class AppliedOverlay:
  """An overlay file as applied (for the plan)."""
  id: str
  file: str
  provenance: dict
  mjcf: tuple[str, ...]
  components: tuple[str, ...]

  def __hash__(self):
    return hash((self.id, self.file))


_SKIP_ATTRS = {'name', 'id', 'classname', 'parent', 'signature', 'info', 'frame', 'type',
               'userdata', 'plugin'}


def _numeric_attributes(elem) -> list[str]:
  out = []
  for a in dir(elem):
    if a.startswith('_') or a in _SKIP_ATTRS:
      continue
    try:
      v = getattr(elem, a)
    except Exception:  # noqa: BLE001 - some bindings raise on read
      continue
    if isinstance(v, (bool, int, float, np.ndarray)) and not callable(v):
      out.append(a)
  return out


def _set_attribute(elem, attr: str, value, file: str, path: str) -> str:
  """Sets a numeric MjSpec attribute; returns a description for the plan."""
  attrs = _numeric_attributes(elem)
  if attr not in attrs:
    raise ConfigError(file, f'{path}.attribute', 'no numeric attribute of that name'
                      + did_you_mean(attr, attrs), attr)
  cur = getattr(elem, attr)
  where = f'{path}.value'
  try:
    arr = np.asarray(value, dtype=float)
  except (TypeError, ValueError):
    raise ConfigError(file, where, f'must be a number or a list of numbers for {attr}',
                      value) from None
  if not np.all(np.isfinite(arr)):
    raise ConfigError(file, where, 'must be finite', value)
  if isinstance(cur, np.ndarray):
    if arr.ndim == 0 and cur.size > 1 and np.all(cur.reshape(-1)[1:] == 0):
      # a single number where MJCF takes one (damping="0.1", gear="2"): the leading element,
      # the rest stay 0 as the XML parser leaves them
      cur.reshape(-1)[0] = float(arr)
      return f'{attr} = {value}'
    if arr.shape != cur.shape:
      raise ConfigError(file, where, f'{attr} has {cur.size} values; give a list of '
                        f'{cur.size}', value)
    cur[...] = arr
  else:
    if arr.ndim != 0:
      raise ConfigError(file, where, f'{attr} is a scalar', value)
    if isinstance(cur, bool):
      setattr(elem, attr, bool(arr))
    elif isinstance(cur, int):
      if arr != int(arr):
        raise ConfigError(file, where, f'{attr} is an integer', value)
      setattr(elem, attr, int(arr))
    else:
      setattr(elem, attr, float(arr))
  return f'{attr} = {value}'


class OverridesModel(Strict):
  """`fibril_mjx.load(path, overrides=...)` (SPEC §8): overlay entries applied as the last layer,
  after the overlay files; errors name the pseudo-file `overrides`."""
  mjcf: list[OverlayMjcf] = []
  components: list[OverlayComponentField] = []


OVERRIDES_FILE = 'overrides'


def _apply_mjcf(spec: mujoco.MjSpec, entries, file: str) -> list[str]:
  """Sets the `mjcf:` entries of an overlay (or the overrides) on `spec`; plan lines."""
  lines = []
  for k, e in enumerate(entries):
    p = f'mjcf[{k}]'
    elem = getattr(spec, e.element)(e.name)
    if elem is None:
      names = [x.name for x in getattr(spec, _PLURAL[e.element])]
      raise ConfigError(file, f'{p}.name', f'no {e.element} of that name in the model'
                        + did_you_mean(e.name, names), e.name)
    lines.append(f'{e.element} {e.name}: ' + _set_attribute(elem, e.attribute, e.value, file, p))
  return lines


def _component_fields(entries, comps, file: str, layer: str, source: str,
                      fields: dict) -> list[str]:
  """Appends the `components:` entries to `fields[component id]` as `FieldValue`s; plan lines."""
  lines = []
  for k, c in enumerate(entries):
    p = f'components[{k}]'
    if c.component not in comps:
      raise ConfigError(file, f'{p}.component', 'no component of that id in the manifest'
                        + did_you_mean(c.component, comps), c.component)
    fields.setdefault(c.component, []).append(
        (c.field, FieldValue(c.value, layer, source, file, f'{p}.value')))
    lines.append(f'{c.component}.{c.field} = {c.value}')
  return lines


def apply_overlays(manifest: Manifest, spec: mujoco.MjSpec
                   ) -> tuple[tuple[AppliedOverlay, ...], dict[str, list]]:
  """Reads the overlay files in order, sets their MJCF attributes on `spec`, and collects their
  component fields; then the same for `manifest.overrides` (layer `override`, last).

  Returns:
    `(applied overlays, {component id: [(field, FieldValue(layer='overlay'|'override')), ...]})`.
  """
  mfile = str(manifest.path)
  base = manifest.path.resolve().parent
  comps = {c.id for c in manifest.model.components}
  applied, fields = [], {}
  for i, ref in enumerate(manifest.model.parameter_overlays):
    path = (base / ref.file).resolve()
    if not path.is_file():
      raise ConfigError(mfile, f'parameter_overlays[{i}].file', f'file not found ({path})',
                        ref.file)
    file = str(path)
    ov = validate(OverlayModel, load_yaml(path), file=file)
    mjcf_lines = _apply_mjcf(spec, ov.mjcf, file)
    comp_lines = _component_fields(ov.components, comps, file, 'overlay', ov.id, fields)
    applied.append(AppliedOverlay(ov.id, file, dict(ov.provenance), tuple(mjcf_lines),
                                  tuple(comp_lines)))
  overrides = getattr(manifest, 'overrides', None)
  if overrides is not None:
    ov = validate(OverridesModel, overrides, file=OVERRIDES_FILE)
    mjcf_lines = _apply_mjcf(spec, ov.mjcf, OVERRIDES_FILE)
    comp_lines = _component_fields(ov.components, comps, OVERRIDES_FILE, 'override',
                                   'override', fields)
    applied.append(AppliedOverlay('override', OVERRIDES_FILE, {}, tuple(mjcf_lines),
                                  tuple(comp_lines)))
  return tuple(applied), fields
