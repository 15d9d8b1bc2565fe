"""Built-in sensors of one type and config on different sites step as one group
(`fibril_mjx/core/groups.py`): the plan says so, and a grouped run is bitwise the run with every
component a group of one (the reference: the same sensors stepped one by one)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import fibril_mjx
from fibril_mjx.core import groups
from fibril_mjx.workflows import plan
from ref_helpers import per_id, write_manifest

# (MJX rays need a material in the model) three hinged arms, each with a site off its axis and one whose z axis points down at the floor;
# driven apart by raw ctrl sines
XML = """<mujoco model="sensor_groups"><option timestep="0.002"/>
  <asset><material name="grey" rgba="0.5 0.5 0.5 1"/></asset>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1" pos="0 0 -1" material="grey"/>
    <body><joint name="a" type="hinge" axis="0 0 1" damping="0.05"/>
      <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="0.5" contype="0"
            conaffinity="0"/><site name="sa" pos="0.2 0 0"/>
      <site name="da" pos="0.2 0 0" euler="180 0 0"/></body>
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

IMU = dict(period_s=0.004, latency_s=0.004, jitter_s=0.002, loss_probability=0.1,
           angular_velocity_noise_density=[0.01] * 3,
           angular_velocity_bias_turn_on_stddev=[0.02] * 3,
           linear_acceleration_noise_density=[0.05] * 3,
           linear_acceleration_resolution=0.01, integration='delta')


def _alone(components, role_filter):
  """Every component a group of one (the step before grouping)."""
  return tuple(groups.Group((cid,), c, ()) for cid, c in components.items() if role_filter(c))


# per type: its config but the site; the groups of two it forms (the third alone)
OTHERS = {
    'fibril_sim/barometer': dict(period_s=0.004, noise_stddev_pa=2.0, bias_turn_on_stddev_pa=5.0,
                                 resolution_pa=0.5, latency_s=0.004, jitter_s=0.002),
    'fibril_sim/magnetometer': dict(period_s=0.004, earth_field_ut=[20.0, 1.0, -40.0],
                                    noise_stddev_ut=[0.3] * 3, hard_iron_ut=[1.0, 2.0, 3.0],
                                    loss_probability=0.1),
    'fibril_sim/rangefinder': dict(period_s=0.004, max_range_m=5.0, noise_stddev_m=0.01,
                                   resolution_m=0.002, jitter_s=0.002),
    'fibril_sim/ahrs': dict(
        period_s=0.004, latency_s=0.004, jitter_s=0.002, loss_probability=0.1,
        orientation_bandwidth_hz=40.0, orientation_noise_stddev_rad=[0.01] * 3,
        orientation_noise_correlation=[0.5] * 3, yaw_rate_bias_stddev_rad_s=0.02,
        orientation_resolution_rad=0.001, angular_velocity_noise_stddev=[0.01] * 3,
        linear_acceleration_bias=[0.1, 0.0, -0.1], linear_acceleration_resolution=0.01),
    'fibril_sim/airspeed': dict(period_s=0.004, wind_m_s=[1.0, 0.5, 0.0], response_time_s=0.01,
                                offset_pa=1.0, noise_stddev_pa=0.5, resolution_pa=0.01,
                                jitter_s=0.002),
    # two antennas with a lever arm (velocimeter and gyro per member), a common-mode error on
    # one shared stream, an outage
    'fibril_sim/gnss': dict(
        period_s=0.004, latency_s=0.002, origin_latitude_deg=47.0, origin_longitude_deg=8.0,
        lever_arm_m=[0.05, 0.0, 0.02], horizontal_error_stddev_m=0.5,
        horizontal_correlation_time_s=10.0, vertical_error_stddev_m=0.8,
        vertical_correlation_time_s=5.0, common_mode_horizontal_stddev_m=0.3,
        common_mode_correlation_time_s=20.0, common_mode_stream='atmosphere',
        horizontal_velocity_noise_stddev_m_s=0.05, outage_start_s=[0.02], outage_end_s=[0.03]),
}
# the sample field in which the two members differ (each reads its own site)
FIELDS = {'fibril_sim/barometer': 'pressure_pa', 'fibril_sim/magnetometer': 'magnetic_field_ut',
          'fibril_sim/rangefinder': 'distance_m', 'fibril_sim/ahrs': 'orientation',
          'fibril_sim/airspeed': 'differential_pressure_pa',
          'fibril_sim/gnss': 'velocity_enu_m_s'}
SITES = {'fibril_sim/rangefinder': ('da', 'db')}


def _sensors(tmp, odd=True):
  """Per type two sensors alike but for their site (a group); with `odd`, a third IMU and a
  third AHRS with another noise, and a third GNSS without a lever arm (no gyro), each alone."""
  def comp(cid, kind, cfg, site, **kw):
    return {'id': cid, 'type': kind, 'config': {**cfg, 'site': site, **kw}}
  comps = [comp('ia', 'fibril_sim/imu', IMU, 'sa'), comp('ib', 'fibril_sim/imu', IMU, 'sb')]
  if odd:
    comps.append(comp('ic', 'fibril_sim/imu', IMU, 'sc',
                      angular_velocity_noise_density=[0.02] * 3))
  for kind, cfg in OTHERS.items():
    name = kind.split('/')[1]
    comps += [comp(f'{name}_{i}', kind, cfg, site)
              for i, site in zip('ab', SITES.get(kind, ('sa', 'sb')))]
  if odd:
    comps += [comp('ahrs_c', 'fibril_sim/ahrs', OTHERS['fibril_sim/ahrs'], 'sc',
                   angular_velocity_noise_stddev=[0.02] * 3),
              comp('gnss_c', 'fibril_sim/gnss', OTHERS['fibril_sim/gnss'], 'sc',
                   lever_arm_m=[0.0] * 3)]
  return fibril_mjx.load(write_manifest(tmp, XML, comps, **DRIVE))


def _run(sim):
  p = sim.default_params(2)
  st = sim.reset(p, fibril_mjx.world_keys(5, 2))
  st, trace = sim.run(p, st, 30)[:2]
  return per_id(sim.built, st, axis=1), trace


def test_sensors_on_different_sites_group_and_the_plan_says_so(tmp_path):
  sim = _sensors(tmp_path)
  assert [g.ids for g in sim.built.sensing_groups] == [
      ('ia', 'ib'), ('ic',), ('barometer_a', 'barometer_b'),
      ('magnetometer_a', 'magnetometer_b'), ('rangefinder_a', 'rangefinder_b'),
      ('ahrs_a', 'ahrs_b'), ('airspeed_a', 'airspeed_b'), ('gnss_a', 'gnss_b'), ('ahrs_c',),
      ('gnss_c',)]
  text = plan.render(sim)
  assert 'fibril_sim/imu x 2 (ia, ib): one step with a member axis' in text
  for kind in OTHERS:
    name = kind.split('/')[1]
    assert f'{kind} x 2 ({name}_a, {name}_b): one step with a member axis' in text, kind
  assert 'ahrs_c (fibril_sim/ahrs): a group of one' in text


def test_a_grouped_run_is_bitwise_the_run_one_by_one(tmp_path, monkeypatch):
  """Samples (the IMU's with the delta outputs: its site's orientation and velocity probes per
  member), truth and final state of the grouped run equal to those of each sensor stepped
  alone; each member reads its own site."""
  grouped = _sensors(tmp_path / 'grouped', odd=False)
  assert len(grouped.built.stacked_groups) == 1 + len(OTHERS)   # formed now, before the patch
  monkeypatch.setattr(groups, 'form', _alone)
  alone = _sensors(tmp_path / 'alone', odd=False)
  assert not alone.built.stacked_groups
  (a_state, a_trace), (b_state, b_trace) = _run(grouped), _run(alone)
  assert len(a_trace['sensor']) == 2 + 2 * len(OTHERS)
  for x, y in zip(jax.tree.leaves((a_state, a_trace)), jax.tree.leaves((b_state, b_trace)),
                  strict=True):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  ga, gb = (np.asarray(a_trace['truth'][i]['angular_velocity']) for i in ('ia', 'ib'))
  assert np.abs(ga - gb).max() > 1.0   # each member reads its own site's sensors
  da, db = (np.asarray(a_trace['sensor'][i].sample.delta_velocity) for i in ('ia', 'ib'))
  assert np.abs(da - db).max() > 1e-4
  for kind, field in FIELDS.items():
    name = kind.split('/')[1]
    xa, xb = (np.asarray(getattr(a_trace['sensor'][f'{name}_{i}'].sample, field))
              for i in 'ab')
    assert np.isfinite(xa[5:]).all() and np.abs(xa - xb)[5:].max() > 1e-3, name
