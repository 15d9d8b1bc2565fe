"""The MJCF rigs of the inertial validation: the static bench and six poses, the rate table and
the nested hinges / slides of the dynamic rig."""

from __future__ import annotations

import dataclasses
import math
import textwrap


from fibril_mjx.workflows.validate import thermal, vibration
from fibril_mjx.workflows.validate.common import DUT, G, bench_xml
from fibril_mjx.workflows.validate.inertial.device import (Device, POSES, RATE_SITES, SKIP,
                                                           SUBSTEPS, TONES, WINDOW)


# --------------------------------------------------------------------------------- rigs


def _sensor_xml(prefix, site, ahrs):
  s = (f'    <gyro name="g_{prefix}" site="{site}"/>\n'
       f'    <accelerometer name="a_{prefix}" site="{site}"/>\n')
  if ahrs:
    s += f'    <framequat name="q_{prefix}" objtype="site" objname="{site}"/>\n'
  return s


def device_entry(dev: Device, overrides):
  """The manifest entry of the one device of a rig, `DUT` (its `g_/a_/q_dut` MuJoCo sensors),
  thermal and vibration models neutral, `overrides` applied. A rig places it on each of its
  sites in turn: one group of worlds per site (`common.placements`)."""
  cfg = {k: v for k, v in dev.config.items()}
  cfg.update(thermal.neutral_ambient(cfg))   # the thermal sweep has its own rig
  cfg.update(vibration.neutral(cfg))         # and the rotor its own
  cfg.update(overrides)
  cfg['gyroscope_sensor'] = f'g_{DUT}'
  cfg['accelerometer_sensor'] = f'a_{DUT}'
  if dev.rig.orientation:
    cfg['orientation_sensor'] = f'q_{DUT}'
  return {'id': DUT, 'type': dev.type, 'config': cfg}


def static_rig(dev: Device, overrides) -> tuple[str, dict, dict]:
  """Six static poses on a bench (hinge about the vertical through its centre of mass, so
  MuJoCo C and MJX agree), timestep = the output period. Returns `(xml, manifest, {pose: site})`:
  the device is placed on each pose's site in turn."""
  ahrs = dev.rig.orientation
  sites = '\n'.join(f'      <site name="s_{n}" xyaxes="{ax}"/>' for n, (ax, _, _) in POSES.items())
  places = {n: f's_{n}' for n in POSES}
  sensors = _sensor_xml(DUT, next(iter(places.values())), ahrs)
  xml = bench_xml('fibril_validate_static', dev.period_s, sites, sensors=sensors)
  return xml, {'fibril_manifest': 1, 'model': 'static.xml',
               'components': [device_entry(dev, overrides)]}, places


@dataclasses.dataclass
class DynamicPlan:
  dt: float
  rate_amplitude: float        # rad/s, rate table sine
  rate_hz: float
  radius_m: float              # off-axis accelerometer sites
  tone_hz: tuple
  gyro_tone_amp: float         # rad/s each
  accel_tone_amp: float        # m/s² each
  n_ticks: int


def dynamic_plan(dev: Device) -> DynamicPlan:
  p = dev.period_s
  fs = 1.0 / p
  w_lim = dev.channels['angular_velocity'].limit
  a_lim = dev.channels['linear_acceleration'].limit
  rate_amp = 1.3 * w_lim if w_lim > 0 else 10.0
  radius = 1.3 * a_lim / rate_amp ** 2 if a_lim > 0 else 0.1
  bins = [round(f * WINDOW) for f in TONES]
  tones = tuple(b * fs / WINDOW for b in bins)
  n = len(tones)
  g_amp = min(1.0, 0.5 * w_lim / n) if w_lim > 0 else 1.0
  a_amp = min(2.0, 0.5 * a_lim / n) if a_lim > 0 else 2.0
  return DynamicPlan(p / SUBSTEPS, rate_amp, fs / WINDOW, radius, tones, g_amp, a_amp,
                     (SKIP + WINDOW) * SUBSTEPS + SUBSTEPS)


INERTIA = 0.01   # kg·m² of each driven body about its joint (kg for the slide)


def dynamic_rig(dev: Device, plan: DynamicPlan, overrides) -> tuple[str, dict, dict]:
  """Rate table (three sites, one axis each along the spin axis; two off-axis sites for the
  accelerometer range), a hinge about z and a slide along x driven by one motor per sweep
  tone. Motors apply `I·A·2πf·cos(2πft + φ)`, so the rate (or the acceleration) is an exact
  sum of sines on a linear system (no servo in the loop). Timestep = output period / 4.
  Returns `(xml, manifest, {place: site})`: the device is placed on each site in turn."""
  ahrs = dev.rig.orientation
  r = plan.radius_m
  rate_sites = '\n'.join(f'      <site name="s_{n}" xyaxes="{ax}"/>' for n, (ax, _) in
                         RATE_SITES.items())
  inertial = (f'<inertial pos="0 0 0" mass="{INERTIA!r}" '
              f'diaginertia="{INERTIA!r} {INERTIA!r} {INERTIA!r}"/>')
  w = 2 * math.pi * plan.rate_hz
  acts = ['    <motor name="rate_motor" joint="rate"/>']
  script = [{'actuator': 'rate_motor', 'amplitude': INERTIA * plan.rate_amplitude * w,
             'frequency_hz': plan.rate_hz, 'phase_rad': math.pi / 2}]
  for k, f in enumerate(plan.tone_hz):
    acts.append(f'    <motor name="sw_m{k}" joint="sweep"/>')
    acts.append(f'    <motor name="ln_m{k}" joint="lin"/>')
    script.append({'actuator': f'sw_m{k}', 'frequency_hz': f, 'phase_rad': math.pi / 2 + 0.7 * k,
                   'amplitude': INERTIA * plan.gyro_tone_amp * 2 * math.pi * f})
    script.append({'actuator': f'ln_m{k}', 'frequency_hz': f, 'phase_rad': 0.3 + 0.9 * k,
                   'amplitude': INERTIA * plan.accel_tone_amp})
  places = {n: f's_{n}' for n in list(RATE_SITES) + ['cout', 'cin', 'sweep', 'lin']}
  sensors = _sensor_xml(DUT, next(iter(places.values())), ahrs)
  xml = textwrap.dedent(f"""\
      <mujoco model="fibril_validate_dynamic">
        <option timestep="{plan.dt!r}" integrator="Euler" gravity="0 0 -{G!r}"/>
        <worldbody>
          <body name="table">
            <joint name="rate" type="hinge" axis="0 0 1"/>
            {inertial}
      {rate_sites}
            <site name="s_cout" pos="{r!r} 0 0"/>
            <site name="s_cin" pos="{r!r} 0 0" xyaxes="-1 0 0 0 -1 0"/>
          </body>
          <body name="sweep_body">
            <joint name="sweep" type="hinge" axis="0 0 1"/>
            {inertial}
            <site name="s_sweep"/>
          </body>
          <body name="lin_body">
            <joint name="lin" type="slide" axis="1 0 0"/>
            {inertial}
            <site name="s_lin"/>
          </body>
        </worldbody>
        <actuator>
      """) + '\n'.join(acts) + '\n  </actuator>\n  <sensor>\n' + sensors + \
      '  </sensor>\n</mujoco>\n'
  return xml, {'fibril_manifest': 1, 'model': 'dynamic.xml', 'actuator_script': script,
               'components': [device_entry(dev, overrides)]}, places
