"""The AHRS, airspeed, GNSS, optical-flow, lidar and camera sensors of one type and config on
different sites step as one group (`fibril_mjx/core/groups.py`), as `test_sensor_groups.py`
checks for the others: the plan says so, and a grouped run is bitwise the run with every
component a group of one (the reference: the same sensors stepped one by one). The sensors
that cast rays (optical flow, lidar, camera) exclude their site's body from the rays, a static
index: they group only on one body."""

from __future__ import annotations

import jax
import numpy as np

import fibril_mjx
from fibril_mjx.core import groups
from fibril_mjx.workflows import plan
from ref_helpers import per_id, write_manifest

# (MJX rays need a material in the model) three hinged arms, each with a site off its axis; the
# first with two sites whose z axes point down at the floor, the second with one; landmarks on
# the floor; driven apart by raw ctrl sines
XML = """<mujoco model="sensor_groups_more"><option timestep="0.002"/>
  <asset><material name="grey" rgba="0.5 0.5 0.5 1"/></asset>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1" pos="0 0 -1" material="grey"/>
    <site name="l1" pos="0.2 0.1 -0.99"/><site name="l2" pos="0.1 -0.15 -0.99"/>
    <body><joint name="a" type="hinge" axis="0 0 1" damping="0.05"/>
      <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="0.5" contype="0"
            conaffinity="0"/><site name="sa" pos="0.2 0 0"/>
      <site name="da" pos="0.2 0 0" euler="180 0 0"/>
      <site name="ea" pos="0.1 0.02 0" euler="175 0 30"/></body>
    <body pos="1 0 0"><joint name="b" type="hinge" axis="0 1 0" damping="0.1"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="0.4" contype="0"
            conaffinity="0"/><site name="sb" pos="0.3 0 0" euler="20 0 0"/>
      <site name="db" pos="0.3 0 0" euler="170 0 0"/></body>
    <body pos="2 0 0"><joint name="c" type="hinge" axis="1 0 0" damping="0.05"/>
      <geom type="capsule" fromto="0 0 0 0 0.2 0" size="0.02" mass="0.5" contype="0"
            conaffinity="0"/><site name="sc" pos="0 0.2 0"/></body>
  </worldbody>
  <actuator><motor name="ma" joint="a"/><motor name="mb" joint="b"/>
    <motor name="mc" joint="c"/></actuator>
</mujoco>"""

DRIVE = {'actuator_script': [
    {'actuator': 'ma', 'waveform': 'sine', 'amplitude': 0.5, 'frequency_hz': 20.0},
    {'actuator': 'mb', 'waveform': 'sine', 'amplitude': -0.8, 'frequency_hz': 30.0},
    {'actuator': 'mc', 'waveform': 'sine', 'amplitude': 0.3, 'frequency_hz': 10.0}]}

# per type: its config but the site; the two sites of the group; a third site where the same
# config stays alone (another body: the rays exclude the site's body) or None; the sample field
# in which the members differ
TYPES = {
    'fibril_sim/ahrs': (dict(
        period_s=0.004, latency_s=0.004, jitter_s=0.002, loss_probability=0.1,
        orientation_bandwidth_hz=40.0, orientation_noise_stddev_rad=[0.01] * 3,
        orientation_noise_correlation=[0.5] * 3, yaw_rate_bias_stddev_rad_s=0.02,
        orientation_resolution_rad=0.001, angular_velocity_noise_stddev=[0.01] * 3,
        linear_acceleration_bias=[0.1, 0.0, -0.1], linear_acceleration_resolution=0.01),
        ('sa', 'sb'), None, 'orientation'),
    'fibril_sim/airspeed': (dict(
        period_s=0.004, wind_m_s=[1.0, 0.5, 0.0], response_time_s=0.01, offset_pa=1.0,
        noise_stddev_pa=0.5, resolution_pa=0.01, jitter_s=0.002),
        ('sa', 'sb'), None, 'differential_pressure_pa'),
    'fibril_sim/gnss': (dict(
        period_s=0.004, latency_s=0.002, origin_latitude_deg=47.0, origin_longitude_deg=8.0,
        lever_arm_m=[0.05, 0.0, 0.02], horizontal_error_stddev_m=0.5,
        horizontal_correlation_time_s=10.0, vertical_error_stddev_m=0.8,
        vertical_correlation_time_s=5.0, common_mode_horizontal_stddev_m=0.3,
        common_mode_correlation_time_s=20.0, common_mode_stream='atmosphere',
        horizontal_velocity_noise_stddev_m_s=0.05, outage_start_s=[0.02],
        outage_end_s=[0.03]),
        ('sa', 'sb'), None, 'velocity_enu_m_s'),
    'fibril_sim/optical_flow': (dict(
        period_s=0.004, fov_deg=30.0, resolution_px=32, max_range_m=5.0,
        max_flow_rate_rad_s=10.0, max_angular_rate_rad_s=20.0, exposure_s=0.001,
        noise_stddev_rad=0.001, gyro_noise_density=[0.01] * 3,
        gyro_bias_turn_on_stddev_rad_s=[0.01] * 3),
        ('da', 'ea'), 'db', 'flow_rad'),
    'fibril_sim/lidar': (dict(
        period_s=0.004, horizontal_samples=4, vertical_samples=2, vertical_min_deg=40.0,
        vertical_max_deg=70.0, sweep_time_s=0.002, max_range_m=5.0, noise_stddev_m=0.01,
        dropout_probability=0.1),
        ('da', 'ea'), 'db', 'range_m'),
    'fibril_sim/camera': (dict(
        period_s=0.004, landmarks=['l1', 'l2'], width_px=64, height_px=48, fx_px=40.0,
        fy_px=40.0, cx_px=32.0, cy_px=24.0, pixel_noise_stddev_px=0.5),
        ('da', 'ea'), 'db', 'uv_px'),
}


def _alone(components, role_filter):
  """Every component a group of one (the step before grouping)."""
  return tuple(groups.Group((cid,), c, ()) for cid, c in components.items() if role_filter(c))


def _sensors(tmp, odd=True):
  """Per type two sensors alike but for their site (a group); with `odd`, a third AHRS with
  another noise and a third ray sensor of each type on another body (each alone)."""
  comps = []
  for kind, (cfg, sites, other, _) in TYPES.items():
    name = kind.split('/')[1]
    comps += [{'id': f'{name}_{i}', 'type': kind, 'config': {**cfg, 'site': site}}
              for i, site in zip('ab', sites)]
    if odd and other is not None:
      comps.append({'id': f'{name}_c', 'type': kind, 'config': {**cfg, 'site': other}})
  if odd:
    comps.append({'id': 'ahrs_c', 'type': 'fibril_sim/ahrs', 'config': {
        **TYPES['fibril_sim/ahrs'][0], 'site': 'sc', 'angular_velocity_noise_stddev': [0.02] * 3}})
  return fibril_mjx.load(write_manifest(tmp, XML, comps, **DRIVE))


def test_sensors_on_different_sites_group_and_the_plan_says_so(tmp_path):
  sim = _sensors(tmp_path)
  names = [kind.split('/')[1] for kind in TYPES]
  assert [g.ids for g in sim.built.sensing_groups] == [
      (f'{names[0]}_a', f'{names[0]}_b'), (f'{names[1]}_a', f'{names[1]}_b'),
      (f'{names[2]}_a', f'{names[2]}_b')] + [
      g for n in names[3:] for g in ((f'{n}_a', f'{n}_b'), (f'{n}_c',))] + [('ahrs_c',)]
  text = plan.render(sim)
  for n in names:
    assert f'fibril_sim/{n} x 2 ({n}_a, {n}_b): one step with a member axis' in text, n
  assert 'ahrs_c (fibril_sim/ahrs): a group of one' in text


def _run(sim):
  p = sim.default_params(2)
  st = sim.reset(p, fibril_mjx.world_keys(5, 2))
  st, trace = sim.run(p, st, 30)[:2]
  return per_id(sim.built, st, axis=1), trace


def test_a_grouped_run_is_bitwise_the_run_one_by_one(tmp_path, monkeypatch):
  """Samples, truth and final state of the grouped run equal to those of each sensor stepped
  alone; the two members of each type read different values (each reads its own site)."""
  grouped = _sensors(tmp_path / 'grouped', odd=False)
  assert len(grouped.built.stacked_groups) == len(TYPES)   # formed now, before the patch
  monkeypatch.setattr(groups, 'form', _alone)
  alone = _sensors(tmp_path / 'alone', odd=False)
  assert not alone.built.stacked_groups
  (a_state, a_trace), (b_state, b_trace) = _run(grouped), _run(alone)
  assert len(a_trace['sensor']) == 2 * len(TYPES)
  for x, y in zip(jax.tree.leaves((a_state, a_trace)), jax.tree.leaves((b_state, b_trace)),
                  strict=True):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  for kind, (*_, field) in TYPES.items():
    name = kind.split('/')[1]
    xa, xb = (np.asarray(getattr(a_trace['sensor'][f'{name}_{i}'].sample, field),
                         np.float64)[5:] for i in 'ab')
    finite = np.isfinite(xa) & np.isfinite(xb)
    assert finite.any() and np.abs(xa - xb)[finite].max() > 1e-3, name
