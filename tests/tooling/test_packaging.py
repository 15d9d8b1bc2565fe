"""Packaging: MJCF modules and `package://` (SPEC §3.1), profile layering (§3.2), the plan
command, and a non-editable install that still finds `assets/` and `profiles/` (§2).

Only host-side building happens here except in the install test, which runs `load` in a
subprocess; nothing is jitted.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap

import mujoco
import pytest

import fibril_mjx
from fibril_mjx.builder import build as bld
from fibril_mjx.config import paths
from fibril_mjx.workflows import plan

REPO = pathlib.Path(__file__).resolve().parents[2]
R6093U_URI = 'package://fibril_sim_models/mujoco/sensors/r6093u.xml'


def write(path: pathlib.Path, text: str) -> pathlib.Path:
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(textwrap.dedent(text), encoding='utf-8')
  return path


def leftovers(*roots: pathlib.Path) -> list[pathlib.Path]:
  """Resolved copies (`.<stem>.fibril-*.xml`) left under the roots."""
  return [p for r in roots for p in r.rglob('*.fibril-*.xml')]


def sensor_info(m: mujoco.MjModel, name: str) -> tuple[str, int]:
  sid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SENSOR, name)
  assert sid >= 0, f'no sensor {name!r}'
  return mujoco.mjtSensor(m.sensor_type[sid]).name, int(m.sensor_dim[sid])


# ------------------------------------------------------------ (a) the R6093U MJCF module


def test_r6093u_module_attached_with_prefix(tmp_path):
  write(tmp_path / 'carrier.xml', f"""\
      <mujoco model="carrier">
        <option timestep="0.002"/>
        <asset>
          <model name="r6093u" file="{R6093U_URI}"/>
        </asset>
        <worldbody>
          <body name="plate">
            <joint name="yaw" type="hinge" axis="0 0 1"/>
            <geom type="box" size="0.1 0.1 0.01" mass="1"/>
            <frame pos="0.05 0.02 0.015">
              <attach model="r6093u" body="r6093u" prefix="imu_"/>
            </frame>
          </body>
        </worldbody>
      </mujoco>
      """)
  manifest = write(tmp_path / 'manifest.yaml', """\
      fibril_manifest: 1
      model: carrier.xml
      components:
        - id: ahrs
          type: fibril_sim/ahrs
          config:
            period_s: 0.01
            orientation_sensor: imu_sensor_quat
            gyroscope_sensor: imu_sensor_gyro
            accelerometer_sensor: imu_sensor_accel
      """)
  sim = fibril_mjx.load(str(manifest))
  m = sim.mj_model
  assert mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, 'imu_site') >= 0
  assert sensor_info(m, 'imu_sensor_quat') == ('mjSENS_FRAMEQUAT', 4)
  assert sensor_info(m, 'imu_sensor_gyro') == ('mjSENS_GYRO', 3)
  assert sensor_info(m, 'imu_sensor_accel') == ('mjSENS_ACCELEROMETER', 3)
  # The three sensors measure at the attached site, and the component binds them there.
  bound = {b.field: (b.name, b.type, b.dim, b.site) for b in sim.components['ahrs'].sensors}
  assert bound == {
      'orientation_sensor': ('imu_sensor_quat', 'framequat', 4, 'imu_site'),
      'gyroscope_sensor': ('imu_sensor_gyro', 'gyro', 3, 'imu_site'),
      'accelerometer_sensor': ('imu_sensor_accel', 'accelerometer', 3, 'imu_site'),
  }
  # The module brings no timing of its own (MJX would ignore it).
  assert not m.sensor_delay.any() and not m.sensor_interval.any()
  assert not leftovers(tmp_path)


def test_r6093u_module_file_is_in_the_builtin_package():
  path = paths.resolve_uri(R6093U_URI, paths.builtin_packages(), base=REPO, where='test')
  assert path == (paths.assets_dir() / 'mujoco' / 'sensors' / 'r6093u.xml').resolve()
  m = mujoco.MjModel.from_xml_path(str(path))
  assert sensor_info(m, 'sensor_quat') == ('mjSENS_FRAMEQUAT', 4)


# -------------------------------------------------- (b) manifest `packages:` and nesting


def _write_mypkg(tmp_path) -> pathlib.Path:
  """assets/ with robot.xml -> <include> parts/arm.xml -> <model> modules/imu.xml, every
  reference a package:// URI; robot.xml also attaches the built-in R6093U module."""
  pkg = tmp_path / 'assets'
  write(pkg / 'robot.xml', f"""\
      <mujoco model="robot">
        <option timestep="0.002"/>
        <asset>
          <model name="r6093u" file="{R6093U_URI}"/>
        </asset>
        <!-- package://mypkg/not/a/reference.xml: URIs in comments are not resolved -->
        <include file="package://mypkg/parts/arm.xml"/>
        <worldbody>
          <body name="base" pos="0 0 0.5">
            <joint name="base_yaw" type="hinge" axis="0 0 1"/>
            <geom type="box" size="0.05 0.05 0.05" mass="1"/>
            <attach model="r6093u" body="r6093u" prefix="body_imu_"/>
          </body>
        </worldbody>
      </mujoco>
      """)
  write(pkg / 'parts' / 'arm.xml', """\
      <mujoco>
        <asset>
          <model name="imu_module" file="package://mypkg/modules/imu.xml"/>
        </asset>
        <worldbody>
          <body name="arm">
            <joint name="shoulder" type="hinge" axis="0 1 0"/>
            <geom type="capsule" size="0.02 0.1" mass="0.3"/>
            <attach model="imu_module" body="imu" prefix="arm_"/>
          </body>
        </worldbody>
      </mujoco>
      """)
  write(pkg / 'modules' / 'imu.xml', """\
      <mujoco model="imu">
        <worldbody>
          <body name="imu">
            <geom type="box" size="0.01 0.01 0.005" mass="0.01"/>
            <site name="site"/>
          </body>
        </worldbody>
        <sensor>
          <framequat name="quat" objtype="site" objname="site"/>
          <gyro name="gyro" site="site"/>
          <accelerometer name="accel" site="site"/>
        </sensor>
      </mujoco>
      """)
  return pkg


def test_manifest_packages_resolve_in_manifest_include_and_model(tmp_path):
  pkg = _write_mypkg(tmp_path)
  before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob('*'))
  manifest = write(tmp_path / 'manifest.yaml', """\
      fibril_manifest: 1
      model: package://mypkg/robot.xml
      packages: {mypkg: ./assets}
      components:
        - id: arm_ahrs
          type: fibril_sim/ahrs
          config:
            period_s: 0.01
            orientation_sensor: arm_quat
            gyroscope_sensor: arm_gyro
            accelerometer_sensor: arm_accel
        - id: body_ahrs
          type: fibril_sim/ahrs
          config:
            period_s: 0.02
            orientation_sensor: body_imu_sensor_quat
            gyroscope_sensor: body_imu_sensor_gyro
            accelerometer_sensor: body_imu_sensor_accel
      """)
  sim = fibril_mjx.load(str(manifest))
  assert sim.manifest.model_path == (pkg / 'robot.xml').resolve()
  assert sim.manifest.packages['mypkg'] == pkg.resolve()
  m = sim.mj_model
  # From the nested <include> -> <model>: the project's module, prefixed by the arm attach.
  assert mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, 'arm') >= 0
  assert mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, 'arm_site') >= 0
  assert sensor_info(m, 'arm_quat') == ('mjSENS_FRAMEQUAT', 4)
  # From the built-in package, referenced inside a project MJCF file.
  assert mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, 'body_imu_site') >= 0
  assert sensor_info(m, 'body_imu_sensor_gyro') == ('mjSENS_GYRO', 3)
  sites = {cid: {b.site for b in c.sensors} for cid, c in sim.components.items()}
  assert sites == {'arm_ahrs': {'arm_site'}, 'body_ahrs': {'body_imu_site'}}
  # No resolved copy is left behind, and nothing else was written next to the sources.
  assert not leftovers(tmp_path, paths.assets_dir() / 'mujoco')
  assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob('*')) == before + [
      pathlib.Path('manifest.yaml')]


def test_load_spec_leaves_no_copies_after_a_mujoco_error(tmp_path):
  pkg = _write_mypkg(tmp_path)
  # Break the innermost module: MuJoCo fails while the resolved copies exist.
  (pkg / 'modules' / 'imu.xml').write_text('<mujoco><worldbody><body name="imu">'
                                           '<geom type="box" size="1"/></body></worldbody>'
                                           '<sensor><gyro name="g" site="nosuch"/></sensor>'
                                           '</mujoco>')
  with pytest.raises(fibril_mjx.FibrilError) as info:
    spec = bld.load_spec(pkg / 'robot.xml', {**paths.builtin_packages(), 'mypkg': pkg})
    bld.compile_spec(spec, pkg / 'robot.xml')
  assert str(info.value).startswith(f'{pkg / "robot.xml"}: MuJoCo cannot ')
  assert '.fibril-' not in str(info.value)
  assert not leftovers(tmp_path)


def test_manifest_model_path_relative_to_manifest(tmp_path):
  _write_mypkg(tmp_path)
  sub = tmp_path / 'manifests'
  manifest = write(sub / 'm.yaml', """\
      fibril_manifest: 1
      model: ../assets/robot.xml
      packages: {mypkg: ../assets}
      """)
  sim = fibril_mjx.load(str(manifest))
  assert sim.manifest.model_path == (tmp_path / 'assets' / 'robot.xml').resolve()
  assert sim.components == {}


# ------------------------------------------------------------------ (c) profile layering


def test_profile_layering_device_empirical_transport_and_override(tmp_path):
  write(tmp_path / 'catalog' / 'test_link.yaml', """\
      id: test_link
      kind: transport
      component_types: [fibril_sim/ahrs]
      provenance: {source: "test fixture"}
      fields: {jitter_s: 0.001, loss_probability: 0.01}
      """)
  _write_mypkg(tmp_path)
  manifest = write(tmp_path / 'manifest.yaml', """\
      fibril_manifest: 1
      model: package://mypkg/robot.xml
      packages: {mypkg: ./assets}
      profile_paths: [./catalog]
      components:
        - id: ahrs
          type: fibril_sim/ahrs
          config:
            profiles: {device: r6093u_nominal, empirical: r6093u_empirical, transport: test_link}
            orientation_sensor: body_imu_sensor_quat
            gyroscope_sensor: body_imu_sensor_gyro
            accelerometer_sensor: body_imu_sensor_accel
            period_s: 0.02                               # overrides the device profile
            angular_velocity_noise_stddev: [0.1, 0.2, 0.3] # overrides the empirical profile
      """)
  sim = fibril_mjx.load(str(manifest))
  c = sim.components['ahrs']
  fields = dict(c.fields)
  nominal = str(paths.profiles_dir() / 'r6093u_nominal.yaml')
  empirical = str(paths.profiles_dir() / 'r6093u_empirical.yaml')
  link = str((tmp_path / 'catalog' / 'test_link.yaml').resolve())

  def layer(name):
    fv = fields[name]
    return fv.value, fv.layer, fv.source, fv.file, fv.path

  # Instance config overrides a device and an empirical field (explicit override).
  assert layer('period_s') == (0.02, 'config', 'manifest', str(manifest),
                               'components[0].config.period_s')
  assert layer('angular_velocity_noise_stddev') == (
      [0.1, 0.2, 0.3], 'config', 'manifest', str(manifest),
      'components[0].config.angular_velocity_noise_stddev')
  # Device profile.
  assert layer('latency_s') == (0.00677, 'device', 'r6093u_nominal', nominal, 'fields.latency_s')
  assert layer('orientation_yaw_sign') == (-1.0, 'device', 'r6093u_nominal', nominal,
                                           'fields.orientation_yaw_sign')
  assert layer('angular_velocity_limit_rad_s')[:3] == (5.7189, 'device', 'r6093u_nominal')
  # Empirical profile.
  assert layer('orientation_noise_stddev_rad') == (
      [0.00087, 0.00087, 0.0017], 'empirical', 'r6093u_empirical', empirical,
      'fields.orientation_noise_stddev_rad')
  assert layer('yaw_rate_bias_stddev_rad_s')[:3] == (5.0e-5, 'empirical', 'r6093u_empirical')
  # Transport profile from the project catalog.
  assert layer('jitter_s') == (0.001, 'transport', 'test_link', link, 'fields.jitter_s')
  assert layer('loss_probability')[:3] == (0.01, 'transport', 'test_link')
  # Defaults.
  assert fields['phase_s'].layer == 'default' and fields['phase_s'].value == 0.0
  assert fields['angular_velocity_bias'].layer == 'default'
  assert fields['orientation_sensor'].layer == 'config'
  # The validated config and what was built from it use the resolved values.
  assert c.cfg.period_s == 0.02 and c.cfg.latency_s == 0.00677 and c.cfg.jitter_s == 0.001
  assert c.cfg.angular_velocity_noise_stddev == (0.1, 0.2, 0.3)
  assert c.cfg.orientation_noise_correlation == (0.95, 0.95, 0.98)
  assert c.schedule.period_ticks == 10
  assert c.transport.loss_probability == 0.01
  # The plan names every field's layer.
  text = plan.render(sim)
  assert re.search(r'period_s\s+0\.02\s+<- config \(components\[0\]\.config\.period_s\)', text)
  assert re.search(r'latency_s\s+0\.00677\s+<- device profile r6093u_nominal', text)
  assert re.search(r'orientation_noise_stddev_rad\s+\[0\.00087, 0\.00087, 0\.0017\]\s+'
                   r'<- empirical profile r6093u_empirical', text)
  assert re.search(r'jitter_s\s+0\.001\s+<- transport profile test_link', text)
  assert re.search(r'phase_s\s+0\s+<- default', text)


def test_profile_layers_do_not_leak_between_components(tmp_path):
  _write_mypkg(tmp_path)
  manifest = write(tmp_path / 'manifest.yaml', """\
      fibril_manifest: 1
      model: package://mypkg/robot.xml
      packages: {mypkg: ./assets}
      components:
        - id: with_profiles
          type: fibril_sim/ahrs
          config:
            profiles: {device: r6093u_nominal}
            orientation_sensor: arm_quat
            gyroscope_sensor: arm_gyro
            accelerometer_sensor: arm_accel
        - id: bare
          type: fibril_sim/ahrs
          config:
            period_s: 0.004
            orientation_sensor: arm_quat
            gyroscope_sensor: arm_gyro
            accelerometer_sensor: arm_accel
      """)
  sim = fibril_mjx.load(str(manifest))
  a, b = dict(sim.components['with_profiles'].fields), dict(sim.components['bare'].fields)
  assert a['latency_s'].layer == 'device' and b['latency_s'].layer == 'default'
  assert sim.components['bare'].cfg.latency_s == 0.0
  assert sim.components['bare'].cfg.orientation_yaw_sign == 1.0


# --------------------------------------------------------------------- (d) `fibril-mjx plan`


def test_cli_plan_of_the_example_manifest(capsys):
  """`fibril-mjx plan` through `cli.main` in this process (the command in its own process:
  tests/config/test_validation.py and the installed copy below)."""
  from fibril_mjx import cli
  manifest = REPO / 'manifests' / 'ahrs_turntable.yaml'
  code = cli.main(['plan', str(manifest)])
  out, err = capsys.readouterr()
  assert code == 0, err
  assert 'Traceback' not in err
  sim = fibril_mjx.load(str(manifest))
  m = sim.mj_model
  assert f'model {paths.assets_dir() / "examples" / "turntable.xml"}' in out
  assert 'dt 0.002 s' in out
  assert 'ahrs (fibril_sim/ahrs)' in out
  assert 'sample type fibril_sim/ahrs_sample/v1' in out
  # Bound sensors, with their addresses and dims in the compiled model.
  for field, name, kind, dim in (
      ('orientation_sensor', 'imu_sensor_quat', 'framequat', 4),
      ('gyroscope_sensor', 'imu_sensor_gyro', 'gyro', 3),
      ('accelerometer_sensor', 'imu_sensor_accel', 'accelerometer', 3)):
    sid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SENSOR, name)
    adr = int(m.sensor_adr[sid])
    assert f'{field}: {name} ({kind}, adr {adr}, dim {dim}, site imu_site)' in out, out
  # The schedule in ticks, the transport and its queue capacity.
  assert ('schedule: period 0.01 s = 5 ticks, phase 0 s = 0 ticks, first tick 0, '
          'quantization next_boundary') in out
  # latency 6.77 ms = 3.385 ticks -> released 4 ticks later; capacity ceil(0.677) + 1 = 2.
  assert 'transport: latency 0.00677 s = 4 ticks, jitter 0 s, loss 0, queue capacity 2' in out
  # Fields with their layer.
  for pattern in (
      r'orientation_sensor\s+imu_sensor_quat\s+<- config \(components\[0\]\.config\.'
      r'orientation_sensor\)',
      r'period_s\s+0\.01\s+<- device profile r6093u_nominal',
      r'latency_s\s+0\.00677\s+<- device profile r6093u_nominal',
      r'orientation_yaw_sign\s+-1\s+<- device profile r6093u_nominal',
      r'angular_velocity_noise_stddev\s+\[0\.0017, 0\.0017, 0\.0017\]\s+'
      r'<- empirical profile r6093u_empirical',
      r'yaw_rate_bias_stddev_rad_s\s+5e-05\s+<- empirical profile r6093u_empirical',
      r'jitter_s\s+0\s+<- default',
      r'angular_velocity_scale\s+\[1, 1, 1\]\s+<- default',
  ):
    assert re.search(pattern, out), (pattern, out)
  # Every config field of the component is listed once.
  listed = re.findall(r'^      (\w+)\s+.*<- ', out, flags=re.M)
  assert sorted(listed) == sorted(name for name, _ in sim.components['ahrs'].fields)


# ----------------------------------------------------------- (e) a non-editable install

_SOURCE_ITEMS = ('pyproject.toml', 'README.md', 'fibril_mjx', 'assets', 'profiles')

_CHECK = textwrap.dedent("""\
    import sys
    import fibril_mjx
    import fibril_mjx.config.paths as p
    print(fibril_mjx.__file__)
    print(p.assets_dir(), p.profiles_dir())
    sim = fibril_mjx.load(sys.argv[1])
    fields = dict(sim.components['ahrs'].fields)
    print(sim.manifest.model_path)
    print(fields['period_s'].file)
    print(fields['orientation_noise_stddev_rad'].file)
    print(','.join(b.site for b in sim.components['ahrs'].sensors))
    """)


def _copy_source(dst: pathlib.Path) -> pathlib.Path:
  """Copies what a build needs (not .venv, .git, build/), so the build never writes into
  the working tree that other processes use."""
  dst.mkdir()
  for item in _SOURCE_ITEMS:
    src = REPO / item
    if src.is_dir():
      shutil.copytree(src, dst / item, ignore=shutil.ignore_patterns(
          '__pycache__', '*.pyc', '*.egg-info', '.fibril-*.xml', '*.fibril-*.xml'))
    elif src.is_file():
      shutil.copy2(src, dst / item)
  return dst


def _install_pip(src: pathlib.Path, target: pathlib.Path) -> None:
  cmd = [sys.executable, '-m', 'pip', 'install', '--no-deps', '--no-build-isolation',
         '--no-index', '--disable-pip-version-check', '--no-cache-dir', '--target',
         str(target), str(src)]
  r = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                     env=dict(os.environ, PIP_NO_INPUT='1'))
  out = r.stdout + r.stderr
  if r.returncode != 0:
    if "invalid command 'bdist_wheel'" in out or "No module named 'wheel'" in out:
      import setuptools
      pytest.skip('pip cannot build a wheel offline here: the `wheel` package is not '
                  f'installed beside setuptools {setuptools.__version__} (pyproject '
                  'build-system requires setuptools>=69 and wheel; --no-build-isolation uses '
                  'the environment\'s own); see test_setuptools_build_lays_out_package_data')
    if 'No matching distribution' in out or 'Could not find a version' in out:
      pytest.skip(f'pip cannot build offline: {out.strip().splitlines()[-1]}')
    pytest.fail(f'pip install failed:\n{out[-4000:]}')


def _install_build_py(src: pathlib.Path, target: pathlib.Path) -> None:
  """setuptools' own build_py: the files a wheel would contain (same [tool.setuptools]
  packages / package-data), without needing `wheel`."""
  r = subprocess.run([sys.executable, '-c', 'from setuptools import setup; setup()', '-q',
                      'build_py', '--build-lib', str(target)],
                     capture_output=True, text=True, cwd=src, timeout=600)
  if r.returncode != 0:
    pytest.fail(f'setuptools build_py failed:\n{(r.stdout + r.stderr)[-4000:]}')


def _check_files(target: pathlib.Path) -> pathlib.Path:
  """The package data a build lays out; returns its `_data` folder."""
  data = target / 'fibril_mjx' / '_data'
  for rel in ('assets/examples/turntable.xml', 'assets/mujoco/sensors/r6093u.xml',
              'assets/mujoco/actuator_presets.xml', 'profiles/r6093u_nominal.yaml',
              'profiles/r6093u_empirical.yaml', 'profiles/evidence/r6093u_empirical.md'):
    assert (data / rel).is_file(), f'{rel} is not installed'
  return data


def _check_installed(tmp_path: pathlib.Path, target: pathlib.Path) -> None:
  """The installed copy's files, and a manifest loaded and planned by it in a fresh
  interpreter (its assets and profiles found inside it, nothing left behind)."""
  data = _check_files(target)
  work = tmp_path / 'work'
  work.mkdir()
  text = (REPO / 'manifests' / 'ahrs_turntable.yaml').read_text(encoding='utf-8')
  text = re.sub(r'(?m)^model: .*$', 'model: package://fibril_sim_models/examples/turntable.xml',
                text)
  manifest = work / 'ahrs_turntable.yaml'
  manifest.write_text(text, encoding='utf-8')
  env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'PYTHONHOME')}
  env.update(PYTHONPATH=str(target), JAX_PLATFORMS='cpu',
             FIBRIL_MJX_CACHE=str(tmp_path / 'jax_cache'))
  r = subprocess.run([sys.executable, '-c', _CHECK, str(manifest)], capture_output=True,
                     text=True, cwd=work, env=env, timeout=300)
  assert r.returncode == 0, r.stderr[-4000:]
  lines = r.stdout.splitlines()
  module, dirs, model_path, period_file, noise_file, sites = lines[-6:]
  root = str(target.resolve())
  assert module.startswith(root), f'imported {module}, not the installed copy'
  assets, profiles = dirs.split(' ')
  assert assets == str(data.resolve() / 'assets')
  assert profiles == str(data.resolve() / 'profiles')
  assert model_path == str(data.resolve() / 'assets' / 'examples' / 'turntable.xml')
  assert period_file == str(data.resolve() / 'profiles' / 'r6093u_nominal.yaml')
  assert noise_file == str(data.resolve() / 'profiles' / 'r6093u_empirical.yaml')
  assert sites == 'imu_site,imu_site,imu_site'
  assert not leftovers(target), 'resolved copies left inside the installed package'
  # And the command line of the installed copy.
  r = subprocess.run([sys.executable, '-m', 'fibril_mjx.cli', 'plan', str(manifest)],
                     capture_output=True, text=True, cwd=work, env=env, timeout=300)
  assert r.returncode == 0, r.stderr[-4000:]
  assert f'model {data.resolve() / "assets" / "examples" / "turntable.xml"}' in r.stdout
  assert 'period 0.01 s = 5 ticks' in r.stdout


def test_non_editable_pip_install_finds_assets_and_profiles(tmp_path):
  src = _copy_source(tmp_path / 'src')
  target = tmp_path / 'site'
  _install_pip(src, target)
  assert list(target.glob('fibril_mjx-*.dist-info')), 'no dist-info: not a wheel install'
  _check_installed(tmp_path, target)


def test_setuptools_build_lays_out_package_data(tmp_path):
  """setuptools' build_py output, which needs no `wheel` package: the `[tool.setuptools]`
  package-data config ships assets/ and profiles/. Where `wheel` is installed the pip test
  above runs the installed copy from the same config; here only its files are checked then
  (without `wheel`, where that test skips, the copy is run here too)."""
  src = _copy_source(tmp_path / 'src')
  target = tmp_path / 'lib'
  _install_build_py(src, target)
  if importlib.util.find_spec('wheel') is not None:
    _check_files(target)
  else:
    _check_installed(tmp_path, target)


def test_every_package_folder_is_listed_in_pyproject():
  """`[tool.setuptools] packages` is an explicit list (the built-in assets and profiles are
  mapped in from the repository root, which package discovery cannot express): a package folder
  missing from it would be left out of a wheel."""
  import tomllib
  listed = set(tomllib.loads((REPO / 'pyproject.toml').read_text())['tool']['setuptools']['packages'])
  folders = {'.'.join(p.parent.relative_to(REPO).parts)
             for p in (REPO / 'fibril_mjx').rglob('__init__.py') if '__pycache__' not in p.parts}
  assert folders - listed == set(), f'add to pyproject.toml [tool.setuptools] packages: {sorted(folders - listed)}'
  assert {p for p in listed - folders if not p.startswith('fibril_mjx._data.')} == set()
