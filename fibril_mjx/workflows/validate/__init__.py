"""`fibril-mjx validate`: the sensor-modelling guide's minimum test set (SPEC §12) as rigs.

The tool builds its own MJCF rigs around a copy of one IMU / AHRS component (the resolved
config of the user's manifest: profiles, instance fields; the user's robot is not needed),
runs them batched (many worlds = many independent realizations in one rollout) and compares
what the simulated device delivers with what its configuration says.

The checks per sensor family, with their rigs, are listed in the module that implements them:
`inertial` (IMU / AHRS: static Allan / noise, six orientations, rate table, range, Bode,
timing, geometry), `nav` (magnetometer, barometer, airspeed, rangefinder: static noise and
Gauss–Markov rigs), `gnss` and `extero` (optical flow: translation and rotation rigs; lidar: a static
fan rig; camera: a static landmark grid);
`common` holds the `Check` line, the timing check, the summary and the output staging shared
by all of them. Each module registers its rigs by component type (the `validation_rig` part of
`fibril_mjx.core.registry`); this package imports every module of its folder, and `run` calls
the rig registered for the component's type (a type registered elsewhere, with
`fibril_mjx.register(..., validation_rig=...)`, is validated the same way).

Tolerances are sampling errors of the run (k = 4 standard errors, from the number of
samples / worlds / equivalent degrees of freedom) plus stated systematic allowances (the
output LSB, float32 rounding); each check states its basis in the summary.
"""

from __future__ import annotations

import pathlib
import sys
import time

import numpy as np

from fibril_mjx.batch.simulation import load as load_simulation
from fibril_mjx.core import registry
from fibril_mjx.errors import ConfigError, FibrilError
from fibril_mjx.workflows.validate import common, gnss, inertial, nav
from fibril_mjx.workflows.validate.common import Check, render
from fibril_mjx.workflows.validate.gnss import GNSS_TYPE
from fibril_mjx.workflows.validate.inertial import SENSOR_FIELDS
from fibril_mjx.io import outdir

__all__ = ['run', 'render', 'resolved_config', 'Check', 'GNSS_TYPE',
           'common', 'inertial', 'nav', 'gnss']

# Every rig of this folder: each module registers its rigs by type when imported.
registry.discover(sys.modules[__name__])


def resolved_config(manifest_path, cid: str) -> tuple[str, dict]:
  """`(type, {field: value})` of component `cid` after profile layering (no sensor names).

  Builds the user's manifest (so every profile and config rule is checked once, with the
  usual one-line errors) and reads the component's resolved fields.
  """
  sim = load_simulation(manifest_path)
  if cid not in sim.components:
    raise ConfigError(str(manifest_path), 'components', 'no component with id '
                      f'{cid!r} (has: {", ".join(sim.components)})', cid)
  comp = sim.components[cid]
  supported = registry.types('validation_rig')
  if comp.type not in supported:
    raise ConfigError(str(manifest_path), f'components[{list(sim.components).index(cid)}].type',
                      f'validate supports {", ".join(supported)}', comp.type)
  cfg = {}
  for name, fv in comp.fields:
    if name in SENSOR_FIELDS or name == 'profiles':
      continue
    cfg[name] = _plain(fv.value)
  return comp.type, cfg


def _plain(v):
  if isinstance(v, (tuple, list)):
    return [_plain(x) for x in v]
  if isinstance(v, np.generic):
    return v.item()
  return v


def run(manifest_path, component: str, out, *, static_duration_s: float = 100.0,
        worlds: int = 16, seed: int = 0, perturb: dict | None = None, overwrite=False,
        progress=print) -> dict:
  """Runs every check and writes `out/` (summary.txt/json, plots, the rig files).

  Args:
    manifest_path: the user's manifest; `component` the id of a component in it whose type
      has a rig (`registry.types('validation_rig')`).
    out: output directory (must not hold anything unless `overwrite`).
    static_duration_s: length of the static records (longer resolves slower terms).
    worlds: worlds per rig (independent realizations).
    perturb: manifest fields changed in the simulated device only (the checks still use the
      configured values): a deliberate mismatch, to see which checks catch it.

  Returns:
    the summary dict (`passed`, `checks`, ...).
  """
  t0 = time.time()
  out = outdir.claim(out, overwrite=overwrite)
  ctype, cfg = resolved_config(manifest_path, component)
  perturb = dict(perturb or {})
  for k in perturb:
    if k not in cfg:
      raise ConfigError('--perturb', k, 'not a field of this component', perturb[k])
  rig = registry.get(ctype).validation_rig
  return rig(manifest_path, component, ctype, cfg, out, static_duration_s=static_duration_s,
             worlds=worlds, seed=seed, perturb=perturb, progress=progress, t0=t0)
