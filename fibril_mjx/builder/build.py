"""Host-side build: MJCF (with `package://`) → MjSpec → assemblies → overlays → MjModel →
components bound by name → scripts, returned as one static `Built` (its MJX model is made at
first use)."""

from __future__ import annotations

from fibril_mjx import components
from fibril_mjx.config.manifest import ComponentConfig
from fibril_mjx.core import command_script, protocol, registry
from fibril_mjx.core.built import Built
from fibril_mjx.core.context import DCMOTOR_PARAMS, BuildContext, ProbeSet, SensorBinding  # noqa: F401
from fibril_mjx.errors import ConfigError, FibrilError, did_you_mean
from fibril_mjx.physics import assemblies, dcmotor
from fibril_mjx.physics.mjcf import compile_spec, keyframe_id, load_spec, reject_mjx_ignored  # noqa: F401

# Every built-in component type: each module under components/ registers itself when imported.
registry.discover(components)


def assembly_channels() -> dict:
  """`{component type: its assembly channel fields}` of the types that register
  `assembly_channels` (what `physics/assemblies.py` binds, layered below the registry)."""
  return {t: registry.get(t).assembly_channels for t in registry.types('assembly_channels')}


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
      try:
        path = c.param_path(name)
      except FibrilError as e:     # a fault path that names no per-world parameter
        raise ConfigError(file, f'vary.{cid}', str(e), name) from None
      if path is None:
        known = [n for n, _ in c.fields if c.param_path(n) is not None]
        raise ConfigError(file, f'vary.{cid}', f'not a per-world field of {c.type} (static '
                          'config cannot vary per world in one compiled program)'
                          + did_you_mean(name, known), name)
    out[cid] = frozenset(names)
  return out


def build(manifest, vary: dict | None = None) -> Built:
  """Host-side build: MJCF (with `package://`) → MjSpec → assemblies → overlays → compile →
  bind components → scripts (the MJX model: `Built.mx`, at its first use).

  Args:
    manifest: a parsed `fibril_mjx.config.manifest.Manifest`.
    vary: `{component id: [manifest field, ...]}` — per-world fields compiled into the graph
      even when their manifest value is the default (so a per-world value takes effect).
  """
  file = str(manifest.path)
  spec = load_spec(manifest.model_path, manifest.packages)
  # Robot geometry and calibration are materialized into the spec before compile (SPEC §3.3,
  # §3.4): assembly gears first, then overlays in manifest order.
  resolved_assemblies = assemblies.apply_assemblies(manifest, spec, assembly_channels())
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
  probes = ProbeSet(mj_model)
  for i, entry in enumerate(manifest.model.components):
    path = f'components[{i}]'
    known = registry.types('build')
    if entry.type not in known:
      raise ConfigError(file, f'{path}.type', 'unknown component type'
                        + did_you_mean(entry.type, known) +
                        f'; known types: {", ".join(known)}', entry.type)
    if entry.id == DCMOTOR_PARAMS:
      raise ConfigError(file, f'{path}.id', 'reserved name', entry.id)
    ctx = BuildContext(mj_model, dt, file, f'{path}.config',
                       assembly=resolved_assemblies.get(entry.id), built=dict(components),
                       entries=tuple((e.id, e.type) for e in manifest.model.components),
                       vary=frozenset(vary.get(entry.id, ())), probes=probes)
    raw = ComponentConfig(entry.config, overlay_fields.get(entry.id, ()))
    component = registry.get(entry.type).build(entry.id, raw, ctx, manifest.catalog)
    protocol.check(component)
    components[entry.id] = component
  vary = _check_vary(manifest, components, vary)
  if probes.probes:   # the hidden sensors components read physics through (core/context.py)
    probes.add_to_spec(spec)
    mj_model = compile_spec(spec, manifest.model_path)
    probes.check(mj_model)
  actuator_script = command_script.build_actuator_script(manifest, mj_model)
  _check_one_driver_per_actuator(manifest, components)
  cmd_script = command_script.build(manifest, components, dt)
  # MJX cannot step dcmotor: step a twin model and evaluate dcmotor in JAX (fibril_mjx.physics.dcmotor).
  physics_model, dc = dcmotor.prepare(mj_model, spec)
  keyframe = keyframe_id(mj_model, manifest.model.keyframe, file)
  if keyframe >= 0 and dc is not None:
    raise ConfigError(file, 'keyframe', 'a keyframe start is not supported on a model with '
                      'dcmotor actuators (their state starts at mj_resetData\'s zeros); remove '
                      'keyframe, or start from qpos0 with campaign initial: offsets',
                      manifest.model.keyframe)
  return Built(manifest, mj_model, physics_model, dt, components, actuator_script,
               cmd_script, dc, resolved_assemblies, tuple(overlays), vary, probes, keyframe)


def _check_one_driver_per_actuator(manifest, components: dict) -> None:
  """Each MuJoCo actuator is written by one component (or the actuator_script), never two."""
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
