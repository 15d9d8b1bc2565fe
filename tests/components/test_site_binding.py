"""Devices on a robot as it comes, for every component that binds MuJoCo sensors by name besides
the IMU and AHRS (tests/core/test_site_sensors.py): the rangefinder, airspeed probe, GNSS
receiver and barometer may name a site instead, and the sensors they need are added there as
`fibril_<id>_<what>`. References outside the code under test: the sensors written by hand into
the MJCF on the same site (`vel`, `gyro`, `range` of tests/nav_helpers.py), read by MuJoCo C; a
component bound by name to them beside its twin bound by site; the encoder's joint read by a
hand-written `jointpos`."""

import mujoco
import numpy as np
import pytest

import fibril_mjx as fm
from fibril_mjx.errors import ConfigError
from fibril_mjx.workflows import plan

import nav_helpers as nh

ORIGIN = dict(origin_latitude_deg=52.2297, origin_longitude_deg=21.0122, origin_height_m=110.0)
LEVER = [0.1, -0.05, 0.2]
# the body spins and flies from a keyframe, so that every sensor reads something non-trivial
# (the wheel raised off the beam, so that the rangefinder sees the ground)
XML = nh.NAV_XML.replace('<body name="wheel">', '<body name="wheel" pos="0 0 0.2">').replace(
    '  </sensor>', '    <jointpos name="spin_pos" joint="spin_joint"/>\n  </sensor>\n'
    '  <keyframe>\n    <key name="tumble" qpos="0 0 1 1 0 0 0 0.3" '
    'qvel="0.5 -0.3 0.2 0.9 -1.2 0.7 4"/>\n  </keyframe>')
TYPES = {
    'range': ('fibril_sim/rangefinder', {'max_range_m': 5.0}, {'rangefinder_sensor': 'range'}),
    'air': ('fibril_sim/airspeed', {}, {'velocity_sensor': 'vel'}),
    'gnss': ('fibril_sim/gnss', {**ORIGIN, 'lever_arm_m': LEVER},
             {'velocity_sensor': 'vel', 'angular_velocity_sensor': 'gyro'}),
    'baro': ('fibril_sim/barometer', {'site': 's', 'airspeed_bias_points_m_s': [0.0, 2.0],
                                      'airspeed_bias_pa': [0.0, 30.0]},
             {'velocity_sensor': 'vel'}),
}
ADDED = {'fibril_range_site_range': ('RANGEFINDER', 'range'),
         'fibril_air_site_vel': ('VELOCIMETER', 'vel'),
         'fibril_gnss_site_vel': ('VELOCIMETER', 'vel'),
         'fibril_gnss_site_gyro': ('GYRO', 'gyro'),
         'fibril_baro_site_vel': ('VELOCIMETER', 'vel')}


def _comp(cid, kind, **config):
  typ, own, _ = TYPES[kind]
  return {'id': cid, 'type': typ, 'config': {'period_s': nh.DT, **own, **config}}


def _twins():
  """Each type twice: bound by name to the hand-written sensors, and by `site: s`."""
  comps = []
  for kind, (_, _, named) in TYPES.items():
    comps.append(_comp(f'{kind}_named', kind, **named))
    comps.append(_comp(f'{kind}_site', kind, site='s'))
  comps.append({'id': 'enc', 'type': 'fibril_sim/encoder',
                'config': {'joint': 'spin_joint', 'period_s': nh.DT}})
  return comps


def test_added_sensors_read_what_hand_written_ones_read_in_mujoco_c(tmp_path):
  path = nh.manifest(tmp_path, _twins(), XML, {'keyframe': 'tumble'})
  sim = fm.load(path, physics='c')
  m = sim.mj_model
  d = mujoco.MjData(m)
  mujoco.mj_resetDataKeyframe(m, d, 0)
  for _ in range(20):
    mujoco.mj_step(m, d)
    for name, (kind, ref) in ADDED.items():
      sid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SENSOR, name)
      rid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SENSOR, ref)
      assert sid >= 0 and m.sensor_type[sid] == getattr(mujoco.mjtSensor, f'mjSENS_{kind}')
      assert m.site(m.sensor_objid[sid]).name == 's', name
      got = d.sensordata[m.sensor_adr[sid]:m.sensor_adr[sid] + m.sensor_dim[sid]]
      want = d.sensordata[m.sensor_adr[rid]:m.sensor_adr[rid] + m.sensor_dim[rid]]
      assert np.abs(want).max() > 0.1, ref   # tumbling and flying: non-trivial readings
      np.testing.assert_array_equal(got, want, err_msg=name)
  text = plan.render(sim)
  assert ("fibril_range_site_range (rangefinder at site 's'); fibril_air_site_vel (velocimeter "
          "at site 's'); fibril_gnss_site_vel (velocimeter at site 's'); fibril_gnss_site_gyro "
          "(gyro at site 's'); fibril_baro_site_vel (velocimeter at site 's')") in text, text


def test_a_component_bound_by_site_delivers_what_its_twin_bound_by_name_delivers(tmp_path):
  sim = fm.load(nh.manifest(tmp_path, _twins(), XML, {'keyframe': 'tumble'}), physics='c')
  _, tr, _ = sim.rollout(sim.default_params(1), fm.world_keys(0, 1), 25)
  truth = {'range': 'distance_m', 'air': 'probe_ground_speed_m_s',
           'gnss': 'antenna_velocity_m_s', 'baro': 'site_z_m'}
  for kind, field in truth.items():
    ref = np.asarray(tr['truth'][f'{kind}_named'][field])
    assert np.abs(ref).max() > 0.1, kind
    np.testing.assert_array_equal(np.asarray(tr['truth'][f'{kind}_site'][field]), ref,
                                  err_msg=kind)
  for kind in TYPES:   # the delivered samples too (no noise configured: equal to the bit)
    named = tr['sensor'][f'{kind}_named'].sample
    site = tr['sensor'][f'{kind}_site'].sample
    for k, v in named._asdict().items():
      np.testing.assert_array_equal(np.asarray(getattr(site, k)), np.asarray(v),
                                    err_msg=f'{kind}.{k}')
  # the barometer's airspeed bias (0 -> 30 Pa over 0 -> 2 m/s) is in: without the added
  # velocimeter's speed its pressure would be the ISA pressure of the site's height alone
  p0, t0, z = 101325.0, 288.15, np.asarray(tr['truth']['baro_site']['site_z_m'])
  isa = p0 * (1 - 0.0065 * z / t0) ** 5.255877
  assert np.abs(np.asarray(tr['sensor']['baro_site'].sample.pressure_pa) - isa).max() > 5.0
  # the encoder binds by joint: its truth is the hand-written jointpos (MuJoCo C, float64)
  m, d = sim.mj_model, mujoco.MjData(sim.mj_model)
  mujoco.mj_resetDataKeyframe(m, d, 0)
  ref = []
  for _ in range(26):
    mujoco.mj_forward(m, d)
    ref.append(d.sensordata[m.sensor_adr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SENSOR,
                                                           'spin_pos')]])
    mujoco.mj_step(m, d)
  np.testing.assert_allclose(np.asarray(tr['truth']['enc']['position'])[0], ref, rtol=0,
                             atol=1e-6)


P = 'components[0].config'


@pytest.mark.parametrize('comp, field, value, rule', [
    (_comp('r', 'range'), 'rangefinder_sensor', None,
     'required: the name of a MuJoCo rangefinder sensor; or set site: SITE instead, and the '
     "sensors are added (as fibril_r_range, ...) without editing the robot's file"),
    (_comp('a', 'air'), 'velocity_sensor', None,
     'required: the name of a MuJoCo velocimeter sensor; or set site: SITE instead'),
    (_comp('a', 'air', site='s', velocity_sensor='vel'), 'velocity_sensor', "'vel'",
     "set beside site 's': name the MuJoCo sensors or the site, not both (with site the sensors "
     'are added)'),
    (_comp('g', 'gnss', site='s', angular_velocity_sensor='gyro'), 'angular_velocity_sensor',
     "'gyro'", "set beside site 's': name the MuJoCo sensors or the site, not both"),
    (_comp('g', 'gnss', velocity_sensor='vel'), 'angular_velocity_sensor', None,
     'required with a lever arm (the gyro on the site of velocity_sensor gives ω for v + ω × l); '
     'or set site: SITE instead of both sensor names, and both are added there'),
    (_comp('g', 'gnss', site='s_2'), 'site', "'s_2'",
     "no MuJoCo site of that name in the compiled model (did you mean 's2'?); the model's "
     'sites: s, s2'),
    (_comp('r', 'range', site='s_'), 'site', "'s_'",
     'no MuJoCo site of that name in the compiled model (did you mean'),
])
def test_binding_errors_name_the_field_and_the_way_out(tmp_path, comp, field, value, rule):
  nh.assert_rule(tmp_path, [comp], f'{P}.{field}', value, rule)


def test_an_added_name_the_model_already_uses_is_refused(tmp_path):
  xml = nh.NAV_XML.replace('name="range"', 'name="fibril_r_range"')
  path = nh.manifest(tmp_path, [_comp('r', 'range', site='s')], xml)
  with pytest.raises(ConfigError, match=r"components\[0\].config.site = 's': the model already "
                     r"has a sensor named 'fibril_r_range', the name of the sensor site adds for "
                     r'rangefinder_sensor: bind the sensors by name \(rangefinder_sensor: '
                     r'fibril_r_range, ...\) instead'):
    fm.load(path)


def test_gnss_without_a_lever_arm_adds_no_gyro(tmp_path):
  own = {k: v for k, v in TYPES['gnss'][1].items() if k != 'lever_arm_m'}
  comp = {'id': 'g', 'type': 'fibril_sim/gnss', 'config': {'period_s': nh.DT, **own, 'site': 's'}}
  sim = fm.load(nh.manifest(tmp_path, [comp]), physics='c')
  names = [sim.mj_model.sensor(i).name for i in range(sim.mj_model.nsensor)]
  assert 'fibril_g_vel' in names and 'fibril_g_gyro' not in names, names
