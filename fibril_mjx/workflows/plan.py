"""`fibril-mjx plan`: the resolved plan as text."""

from __future__ import annotations


from fibril_mjx.batch import physics_c
from fibril_mjx.batch import worlds
from fibril_mjx.config.version import __version__
from fibril_mjx.core import protocol
from fibril_mjx.physics import dcmotor


def _fmt(v) -> str:
  if isinstance(v, (tuple, list)):
    return '[' + ', '.join(_fmt(x) for x in v) + ']'
  if isinstance(v, float):
    return f'{v:g}'
  return str(v)


def render(sim) -> str:
  """Components, bound sensors, schedules in ticks, queues and every field's final value with
  the layer it came from."""
  m, man = sim.mj_model, sim.manifest
  out = [f'fibril_mjx {__version__} plan for {man.path}',
         f'manifest sha256 {man.sha256[:16]}',
         f'model {man.model_path}',
         f'  dt {sim.dt:g} s; nq {m.nq}, nv {m.nv}, nu {m.nu} controls, {m.nsensor} sensors',
         '  initial state: ' + (f'keyframe {man.model.keyframe!r} (#{sim.built.keyframe}: qpos, '
                                'qvel, act, ctrl, mocap as mj_resetDataKeyframe)'
                                if sim.built.keyframe >= 0 else 'qpos0 (mj_resetData)'),
         ]
  out.extend(world_axis_lines(sim))
  if sim.actuator_script.ctrl_index:
    out.append('actuator_script (open-loop ctrl):')
    for i, s in enumerate(man.model.actuator_script):
      out.append(f'  {s.actuator} (ctrl[{sim.actuator_script.ctrl_index[i]}]): {s.waveform} amplitude '
                 f'{s.amplitude:g}, {s.frequency_hz:g} Hz, phase {s.phase_rad:g} rad, offset '
                 f'{s.offset:g}')
  if sim.assemblies:
    out.append('assemblies (gear written into the bound channels before compile):')
    out.extend(f'  {a.describe()}' for a in sim.assemblies.values())
  if sim.overlays:
    out.append('parameter_overlays (applied in order after assemblies / profiles; '
               "'override' = load(overrides=), the last layer):")
    for ov in sim.overlays:
      out.append(f'  {ov.id} ({ov.file})' + (f'; provenance {_fmt_prov(ov.provenance)}'
                                             if ov.provenance else ''))
      out.extend(f'    mjcf {line}' for line in ov.mjcf)
      out.extend(f'    component {line}' for line in ov.components)
  if sim.command_script.entries:
    out.append('command_script (open-loop commands when none are passed):')
    out.extend(f'  {line}' for line in sim.command_script.describe())
  native = {}
  if sim.dcmotor is not None:
    native = {d['actuator_id']: d for d in dcmotor.describe(sim.dcmotor, sim.mj_model)}
  out.extend(_group_lines(sim.built))
  out.append('components:')
  for cid, c in sim.components.items():
    out.append(f'  {cid} ({c.type})')
    out.extend('    ' + line for line in c.describe())
    for b in (c.bindings if protocol.ACTUATOR in c.roles else ()):
      if b.id in native:
        out.append(f'    native dcmotor parameters of {b.name} (MJCF):')
        out.extend(f'      {line}' for line in _dcmotor_lines(native[b.id]))
    out.append('    fields (value  <- layer):')
    width = max(len(n) for n, _ in c.fields)
    for name, fv in c.fields:
      if fv.layer == 'default':
        src = 'default'
      elif fv.layer == 'config':
        src = f'config ({fv.path})'
      elif fv.layer == 'overlay':
        src = f'overlay {fv.source} ({fv.file}: {fv.path})'
      elif fv.layer == 'override':
        src = f'override ({fv.file}: {fv.path})'
      elif fv.layer == 'assembly':
        src = f'assembly {fv.source} ({fv.path})'
      else:
        src = f'{fv.layer} profile {fv.source}'
      out.append(f'      {name:<{width}}  {_fmt(fv.value)}  <- {src}')
  return '\n'.join(out)


def _group_lines(built) -> list[str]:
  """How the components step (`core/groups.py`): the groups before physics and after it."""
  out = []
  for phase, groups in (('before physics', built.actuator_groups),
                        ('after physics', built.sensing_groups)):
    if groups:
      n = len(groups)
      out.append(f'component groups {phase} ({n} step{"s" * (n != 1)} for '
                 f'{sum(len(g.ids) for g in groups)} components):')
      out.extend(f'  {g.describe()}' for g in groups)
  return out


def _fmt_prov(prov: dict) -> str:
  return ', '.join(f'{k}: {_fmt(v)}' for k, v in prov.items())


def _dcmotor_lines(d: dict) -> list[str]:
  """Native dcmotor parameters (from `dcmotor.describe`) as plan lines."""
  lines = [f'input="{d["input"]}", gear {d["gear"]:g}, resistance {d["resistance_ohm"]:g} ohm, '
           f'motorconst {d["motorconst_nm_per_a"]:g} N*m/A, inductance {d["inductance_h"]:g} H '
           f'(te {d["electrical_time_constant_s"]:g} s)',
           'force range ' + ('unlimited' if d['force_range'] is None else
                             f'[{d["force_range"][0]:g}, {d["force_range"][1]:g}]')
           + (f', current rate limit {d["current_rate_limit_a_per_s"]:g} A/s'
              if d['current_rate_limit_a_per_s'] else '')
           + f', damping {d["damping"]:g}, armature {d["armature"]:g}; states: '
           + (', '.join(d['states']) or 'none')]
  for key in ('controller', 'thermal', 'cogging', 'lugre'):
    if d[key]:
      lines.append(f'{key}: ' + ', '.join(f'{k} {v:g}' for k, v in d[key].items()))
  return lines


def world_axis_lines(sim) -> list[str]:
  """The physics implementation, whether worlds share one physics trajectory, the
  LAPACK-safe sub-batch and, on a CPU, the code generation (`fibril_mjx.batch.worlds`)."""
  import jax
  share, why = sim.physics_sharing()
  cap, cap_why = sim.sub_batch_cap()
  backend, backend_why = physics_c.choose(sim.built, 'auto', impl=sim.impl)
  probes = sim.built.probes.describe() if sim.built.probes is not None else []
  added = sim.built.probes.describe_added() if sim.built.probes is not None else []
  lines = [f'physics: {worlds.describe_impl(sim.impl)}',
           f'physics backend of a run / campaign: {backend} ({backend_why})',
           'probe sensors (hidden, appended to the MjSpec; what components read physics '
           'through): ' + ('; '.join(probes) if probes else 'none'),
           'sensors added to the model for components that name a site (the robot\'s file is '
           'unchanged): ' + ('; '.join(added) if added else 'none'),
           f'physics sharing: {why}' + (' (a run uses 1 shared trajectory for all worlds; '
                                        '--no-share-physics to disable)' if share else ''),
           'world axis: ' + (f'sub-batches of at most {cap} worlds per vmapped call ({cap_why})'
                             if cap else f'one sub-batch per device ({cap_why})')
           + f'; {len(worlds.resolve_devices())} local device(s)']
  if jax.default_backend() == 'cpu':
    isa = worlds.cpu_isa()
    lines.append('CPU code generation: ' + (
        "native ISA (FMA): a world's last bits may depend on its batch layout"
        if isa == 'native' else
        f"{isa} (no FMA): a world's results are bitwise identical in any batch, chunk or "
        'device count'))
  return lines
