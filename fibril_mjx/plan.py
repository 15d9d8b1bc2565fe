"""`fibril-mjx plan`: the resolved plan as text."""

from __future__ import annotations

import mujoco

from fibril_mjx import __version__


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
         ]
  if sim.script.ctrl_index:
    out.append('actuator_script (open-loop ctrl):')
    for i, s in enumerate(man.model.actuator_script):
      out.append(f'  {s.actuator} (ctrl[{sim.script.ctrl_index[i]}]): {s.waveform} amplitude '
                 f'{s.amplitude:g}, {s.frequency_hz:g} Hz, phase {s.phase_rad:g} rad, offset '
                 f'{s.offset:g}')
  out.append('components:')
  for cid, c in sim.components.items():
    out.append(f'  {cid} ({c.type})')
    out.extend('    ' + line for line in c.describe())
    out.append('    fields (value  <- layer):')
    width = max(len(n) for n, _ in c.fields)
    for name, fv in c.fields:
      src = fv.layer if fv.layer in ('default', 'config') else f'{fv.layer} profile {fv.source}'
      if fv.layer == 'config':
        src = f'config ({fv.path})'
      out.append(f'      {name:<{width}}  {_fmt(fv.value)}  <- {src}')
  return '\n'.join(out)
