"""The built-in profile catalog (SPEC §3.2): every shipped profile resolves through a component,
every value states where it came from, and profile kinds are enforced.

Issue 13: `robomaster_m2006_p36`, `c5055_400kv` and `m6c18_170kv` were never resolved by any
test; provenance was checked for the IMU profiles only; an empirical profile could carry a fixed
bias or scale (installed-unit calibration) without an error.
"""

from __future__ import annotations

import pathlib
import textwrap

import pytest
import yaml

import fibril_mjx
from fibril_mjx.config import paths
from fibril_mjx.errors import ConfigError
from ref_helpers import write_manifest

pytestmark = pytest.mark.usefixtures('plain_messages')

PROFILES = sorted(paths.profiles_dir().glob('*.yaml'))
DOCS = {p.stem: yaml.safe_load(p.read_text()) for p in PROFILES}
CASES = [(pid, ctype) for pid, doc in DOCS.items() for ctype in doc['component_types']]

# One tiny model that every component type can bind (dt 1 ms: the 1 kHz transport profile).
XML = textwrap.dedent("""\
    <mujoco model="profile_rig">
      <option timestep="0.001"/>
      <include file="package://fibril_sim_models/mujoco/actuator_presets.xml"/>
      <asset><material name="m" rgba="1 1 1 1"/></asset>
      <default><geom contype="0" conaffinity="0"/></default>
      <worldbody>
        <body name="b"><joint name="j" type="hinge" axis="0 0 1"/>
          <geom type="sphere" size="0.05" mass="1"/><site name="imu"/>
          <site name="down" zaxis="0 0 -1" pos="0 0 0.5"/></body>
        <geom name="floor" type="plane" size="5 5 0.1" material="m"/>
        <body name="b_mm" pos="1 0 0"><joint name="j_mm" type="hinge" axis="0 1 0"/>
          <geom type="sphere" size="0.05" mass="1"/></body>
      </worldbody>
      <actuator>
        <position name="servo" joint="j" kp="10" forcerange="-2 2"/>
        <position name="mm_p" class="fibril_sim_hw_robstride_operation_position" joint="j_mm"/>
        <velocity name="mm_v" class="fibril_sim_hw_robstride_operation_velocity" joint="j_mm"/>
        <motor name="mm_f" class="fibril_sim_hw_robstride_operation_feedforward" joint="j_mm"/>
      </actuator>
      <sensor>
        <framequat name="quat" objtype="site" objname="imu"/>
        <gyro name="gyro" site="imu"/>
        <accelerometer name="accel" site="imu"/>
        <velocimeter name="vel" site="imu"/>
        <rangefinder name="range" site="down"/>
      </sensor>
    </mujoco>
    """)

# The minimal instance config of each type (fields a profile may not set are added if missing).
BASE = {
    'fibril_sim/ahrs': {'orientation_sensor': 'quat', 'gyroscope_sensor': 'gyro',
                        'accelerometer_sensor': 'accel', 'period_s': 0.01},
    'fibril_sim/imu': {'gyroscope_sensor': 'gyro', 'accelerometer_sensor': 'accel',
                       'period_s': 0.002},
    'fibril_sim/motor': {'actuator': 'servo', 'application_period_s': 0.002},
    'fibril_sim/magnetometer': {'site': 'imu', 'earth_field_ut': [0.0, 20.0, -45.0]},
    'fibril_sim/barometer': {'site': 'imu'},
    'fibril_sim/airspeed': {'velocity_sensor': 'vel'},
    'fibril_sim/gnss': {'velocity_sensor': 'vel', 'angular_velocity_sensor': 'gyro',
                        'origin_latitude_deg': 52.0, 'origin_longitude_deg': 21.0},
    'fibril_sim/rangefinder': {'rangefinder_sensor': 'range'},
    'fibril_sim/optical_flow': {'site': 'down'},
    'fibril_sim/lidar': {'site': 'down'},
    'fibril_sim/camera': {'site': 'down', 'landmarks': ['imu']},
    'fibril_sim/motion_motor': {'joint': 'j_mm', 'position_actuator': 'mm_p',
                                'velocity_actuator': 'mm_v', 'feedforward_actuator': 'mm_f',
                                'application_period_s': 0.002},
}

# A value's provenance names its kind of source (SPEC §3.2: datasheet, driver contract,
# recording) or is marked as an assumption.
LABELS = ('OFFICIAL', 'COMMUNITY', 'DERIVED', 'DRIVER CONTRACT', 'RECORDING', 'ASSUMPTION')


def _manifest(tmp: pathlib.Path, components, extra=None) -> pathlib.Path:
  return write_manifest(tmp, XML, components, model='rig.xml', **(extra or {}))


@pytest.mark.parametrize('pid, ctype', CASES, ids=[f'{p}-{t.split("/")[1]}' for p, t in CASES])
def test_every_shipped_profile_resolves_through_its_component(tmp_path, pid, ctype):
  """Each profile, for each component type it declares, builds and supplies every one of its
  fields, with the layer and profile id the plan shows."""
  doc = DOCS[pid]
  config = {k: v for k, v in BASE[ctype].items() if k not in doc['fields']}
  config['profiles'] = {doc['kind']: pid}
  sim = fibril_mjx.load(_manifest(tmp_path, [{'id': 'c', 'type': ctype, 'config': config}]))
  fields = dict(sim.components['c'].fields)
  for name, value in doc['fields'].items():
    fv = fields[name]
    assert (fv.layer, fv.source) == (doc['kind'], pid), name
    assert fv.value == value, name


@pytest.mark.parametrize('pid', sorted(DOCS))
def test_every_profile_value_states_its_source_or_assumption(pid):
  """`provenance.fields.<name>` for every field: a source label (OFFICIAL, COMMUNITY, DERIVED,
  DRIVER CONTRACT, RECORDING) with its citation, or an explicit ASSUMPTION; the evidence
  document exists; nothing cites a file outside the repository."""
  doc = DOCS[pid]
  prov = doc['provenance']
  cited = prov.get('fields') or {}
  for name in doc['fields']:
    text = cited.get(name)
    assert isinstance(text, str), f'{pid}: fields.{name} has no provenance.fields entry'
    assert len(text) > 15 and any(label in text for label in LABELS), (pid, name, text)
  assert (paths.profiles_dir() / prov['evidence']).is_file()
  raw = (paths.profiles_dir() / f'{pid}.yaml').read_text()
  assert 'DEVICE_FACTS' not in raw and '../shared' not in raw


def test_catalog_covers_every_profile_the_spec_names():
  assert {'robomaster_m2006_p36', 'robomaster_m3508_p19', 'robstride_rs00', 'robstride_rs05',
          'c5055_400kv', 'm6c18_170kv'} <= set(DOCS)
  assert all(DOCS[p]['id'] == p for p in DOCS)


# ------------------------------------------------------------------ kinds enforced


def _catalog_with(tmp_path, pid, fields, kind='empirical', types='fibril_sim/imu'):
  cat = tmp_path / 'catalog'
  cat.mkdir(parents=True, exist_ok=True)
  (cat / f'{pid}.yaml').write_text(yaml.safe_dump(
      {'id': pid, 'kind': kind, 'component_types': [types],
       'provenance': {'source': 'test'}, 'fields': fields}, sort_keys=False))
  config = {**BASE['fibril_sim/imu'], 'profiles': {kind: pid}}
  return _manifest(tmp_path, [{'id': 'imu', 'type': 'fibril_sim/imu', 'config': config}],
                   {'profile_paths': ['./catalog']})


@pytest.mark.parametrize('field, value', [
    ('angular_velocity_bias', [0.01, 0.0, 0.0]),
    ('linear_acceleration_scale', [1.01, 1.0, 1.0]),
    ('angular_velocity_misalignment', [[0, 0.01, 0], [0, 0, 0], [0, 0, 0]]),
    ('angular_velocity', {'bias': [0.01, 0.0, 0.0]}),      # a nested config group
])
def test_empirical_profile_with_fixed_bias_scale_or_mounting_is_an_error(tmp_path, field, value):
  """SPEC §3.2: empirical profiles hold zero-mean stochastic residuals, never a fixed bias,
  scale or mounting correction; the error names the profile and the field."""
  manifest = _catalog_with(tmp_path, 'unit_17', {field: value})
  with pytest.raises(ConfigError) as e:
    fibril_mjx.load(manifest)
  msg = str(e.value)
  path = field if not isinstance(value, dict) else f'{field}.bias'
  assert "empirical profile 'unit_17'" in msg and f'fields.{path}' in msg, msg
  assert 'unit_17.yaml' in msg


def test_device_profile_may_hold_a_bias_and_empirical_stochastic_terms_are_allowed(tmp_path):
  """The rule is about the empirical kind only; stochastic `..._bias_..._stddev` terms pass."""
  fibril_mjx.load(_catalog_with(tmp_path / 'dev', 'dev_unit', {'angular_velocity_bias':
                                                               [0.01, 0.0, 0.0]}, kind='device'))
  sim = fibril_mjx.load(_catalog_with(
      tmp_path / 'emp', 'emp_unit', {'angular_velocity_bias_turn_on_stddev': [1e-3] * 3,
                                     'angular_velocity_bias_instability_stddev': [1e-4] * 3,
                                     'angular_velocity_bias_correlation_time_s': [50.0] * 3}))
  assert dict(sim.components['imu'].fields)[
      'angular_velocity_bias_turn_on_stddev'].layer == 'empirical'
