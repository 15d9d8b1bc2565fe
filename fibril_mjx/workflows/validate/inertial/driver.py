"""The driver of the inertial validation (`run_inertial`; `InertialRig`, the rig part of
`fibril_sim/imu` and `fibril_sim/ahrs`), its thermal sweep and its rotor rig."""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from fibril_mjx.workflows.validate import thermal, vibration
from fibril_mjx.workflows.validate.common import (DUT, by_place, by_sequence, collect, finish,
                                                  placements, rig_simulation, staged_output,
                                                  write_rig, Request)
from fibril_mjx.core import registry
from fibril_mjx.mechanisms.rng import world_keys
from fibril_mjx.workflows.validate.inertial.device import (CHANNELS, POSES, Inertial,
                                                           ahrs_channels, device_from_config,
                                                           imu_channels)
from fibril_mjx.workflows.validate.inertial.dynamic import dynamic_checks
from fibril_mjx.workflows.validate.inertial.rigs import dynamic_plan, dynamic_rig, static_rig
from fibril_mjx.workflows.validate.inertial.signals import h_expected
from fibril_mjx.workflows.validate.inertial.static import static_checks


# ------------------------------------------------------------------------------- driver


def thermal_sweep(dev, req: Request, rigs, seed, window_s):
  """The temperature sweep with soak (`workflows/validate/thermal.py`)."""
  cfg, worlds = req.cfg, req.worlds
  plan = thermal.sweep_plan(cfg, dev.period_s, window_s)
  xml, doc = thermal.sweep_rig(cfg, plan, req.perturb)
  sim = rig_simulation(write_rig(rigs, 'thermal', xml, doc))
  req.progress(f'thermal sweep: {len(thermal.LEVELS_K)} set-points x {worlds} worlds x '
           f'{plan.n_ticks} ticks (soak {plan.soak_s:g} s, record {plan.window_s:g} s)')
  n_seg = int(math.ceil(plan.n_ticks / 5000))
  seg = int(math.ceil(plan.n_ticks / n_seg))
  data = collect(sim, sim.default_params(worlds), world_keys(seed, worlds),
                 n_seg * seg, seg, CHANNELS)['pz']
  n_acq = plan.n_ticks - 1
  samples = {ch: by_sequence(data, ch, n_acq) for ch in CHANNELS}
  req.progress(f'  simulated ({time.time() - req.t0:.0f} s); thermal checks')
  return thermal.sweep_checks(dev, cfg, plan, samples)


def _vibration_rig(dev, req: Request, rigs, seed, window_s):
  """The rotor rig: line amplitudes at the reference speed (`workflows/validate/vibration.py`)."""
  cfg, worlds = req.cfg, req.worlds
  xml, doc = vibration.rig(cfg, dev.period_s, req.perturb)
  sim = rig_simulation(write_rig(rigs, 'vibration', xml, doc))
  n_ticks = vibration.n_ticks(dev.period_s, window_s)
  req.progress(f'vibration rig: rotor at {cfg["vibration_reference_speed_rad_s"]:g} rad/s x '
           f'{worlds} worlds x {n_ticks} ticks')
  n_seg = int(math.ceil(n_ticks / 5000))
  seg = int(math.ceil(n_ticks / n_seg))
  data = collect(sim, sim.default_params(worlds), world_keys(seed, worlds), n_seg * seg, seg,
                 CHANNELS)['pz']
  samples = {ch: by_sequence(data, ch, n_ticks - 1) for ch in CHANNELS}
  req.progress(f'  simulated ({time.time() - req.t0:.0f} s); vibration checks')
  return vibration.checks(dev, cfg, samples, lambda ch, f: h_expected(
      dev, dev.channels[ch], f, dev.period_s))


@dataclasses.dataclass(frozen=True)
class InertialRig(Inertial):
  """An `Inertial` record as a rig (`run_inertial`): a type's `validation_rig` part."""

  def __call__(self, manifest_path, component, ctype, cfg, out, **options) -> dict:
    return run_inertial(Request(manifest_path, component, ctype, cfg, out, **options))


def run_inertial(req: Request) -> dict:
  """`validate` for an inertial type (its `validation_rig` an `InertialRig`): the static and
  the dynamic rig, then the thermal sweep and the rotor rig where its type has them and they
  are configured."""
  import jax

  cfg, worlds, seed, progress, t0 = req.cfg, req.worlds, req.seed, req.progress, req.t0
  dev = device_from_config(req.component, req.ctype, cfg)
  with staged_output(req.out) as tmp:
    fig_dir = tmp
    rigs = tmp / 'rigs'
    # ---- static rig: long records, segments keep memory flat; one group of worlds per pose.
    xml, doc, places = static_rig(dev, req.perturb)
    sim = rig_simulation(write_rig(rigs, 'static', xml, doc), placed=True)
    n_acq = int(round(req.static_duration_s / dev.period_s))
    n_seg = int(math.ceil((n_acq + 50) / 5000))
    seg = int(math.ceil((n_acq + 50) / n_seg))
    n_ticks = n_seg * seg
    fields = ('angular_velocity', 'linear_acceleration') + (
        ('orientation',) if dev.rig.orientation else ())
    n_w = len(places) * worlds
    progress(f'static rig: {len(places)} poses x {worlds} worlds x {n_ticks} ticks '
             f'({n_ticks * dev.period_s:g} s)')
    data = collect(sim, sim.default_params(n_w), world_keys(seed, n_w), n_ticks, seg, fields,
                   model=placements(sim.mj_model, list(places.values()), worlds))[DUT]
    data = by_place(data, places, worlds)
    progress(f'  simulated ({time.time() - t0:.0f} s); analysing')
    checks = static_checks(dev, data, n_acq, None, fig_dir)
    del data
    progress(f'  static checks done ({time.time() - t0:.0f} s)')
    # ---- dynamic rig: rate table, range, sweeps, timing; one group of worlds per site.
    plan = dynamic_plan(dev)
    xml, doc, places = dynamic_rig(dev, plan, req.perturb)
    sim = rig_simulation(write_rig(rigs, 'dynamic', xml, doc), placed=True)
    n_w = len(places) * worlds
    progress(f'dynamic rig: {len(places)} sites x {worlds} worlds x {plan.n_ticks} ticks '
             f'(dt {plan.dt:g} s)')
    _, trace, _ = sim.rollout(sim.default_params(n_w), world_keys(seed + 1, n_w), plan.n_ticks,
                              model=placements(sim.mj_model, list(places.values()), worlds))
    trace = {k: by_place(jax.tree.map(np.asarray, trace[k][DUT]), places, worlds)
             for k in ('sensor', 'truth')}
    progress(f'  simulated ({time.time() - t0:.0f} s); analysing')
    checks += dynamic_checks(dev, plan, trace, fig_dir)
    progress(f'  dynamic checks done ({time.time() - t0:.0f} s)')
    if dev.rig.environment and thermal.has_thermal(cfg):
      checks += thermal_sweep(dev, req, rigs, seed + 2,
                              req.static_duration_s / len(thermal.LEVELS_K))
    if dev.rig.environment and vibration.has_vibration(cfg):
      checks += _vibration_rig(dev, req, rigs, seed + 3, req.static_duration_s / 5)
    return finish(tmp, req, checks, dev=dev)


# The rig of each inertial type, its `validation_rig` part (validate finds this module by
# walking its package).
registry.register('fibril_sim/imu', validation_rig=InertialRig(
    imu_channels, random_walk=True, environment=True))
registry.register('fibril_sim/ahrs', validation_rig=InertialRig(ahrs_channels, orientation=True))
