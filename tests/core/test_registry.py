"""The one registry (`fibril_mjx/core/registry.py`): a new sensor is its module, its profile,
its evidence and its test, with no list in the package edited.

The toy sensor's module is this file: its config, state, `build`, host-side metrics and plot, a
`validate` rig and a ROS 2 message mapping, registered in one `fibril_mjx.register` call. Its
device profile and the evidence note the profile cites are written to a temporary profile
directory. It then goes through `fibril-mjx run`, `validate` and `export-mcap` (in process,
`fibril_mjx.cli.main`), and every part shows in what they write. The expected values are
computed here from the trace and the configuration, not with the package's helpers.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import pathlib
import sys
import textwrap
import time
import types
from typing import NamedTuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
import yaml
from mcap.reader import make_reader
from mcap_ros2.decoder import DecoderFactory

import fibril_mjx
from conftest import write_rig
from fibril_mjx import cli
from fibril_mjx.components import base
from fibril_mjx.components.base import NonNeg
from fibril_mjx.core import registry
from fibril_mjx.errors import ConfigError
from fibril_mjx.io import bags, mcap_export  # noqa: F401  (bags: the `bag` parts)
from fibril_mjx.mechanisms import faults, rng, transport
from fibril_mjx.workflows import fit_profile, schema  # noqa: F401  (the `profile_fit` parts)
from fibril_mjx.workflows.validate import common as vcommon

TOY = 'test/registry_toy'
PKG = pathlib.Path(fibril_mjx.__file__).resolve().parent
DT = 0.002                       # the rig's timestep (tests/conftest.py RIG_XML)


# ------------------------------------------------- the toy sensor's module (this file only)

class ToyConfig(faults.DeviceConfig):
  """A one-axis rate gyro: the z rate of a MuJoCo gyro + offset + white noise, on the usual
  schedule and transport fields (`period_s`, `latency_s`, ...)."""
  gyroscope_sensor: str
  offset: float = 0.0
  noise_stddev: NonNeg = 0.0


class ToyParams(NamedTuple):
  offset: jax.Array
  noise_stddev: jax.Array


class ToySample(NamedTuple):
  yaw_rate: jax.Array            # rad/s


class ToyState(NamedTuple):
  streams: dict
  queue: transport.QueueState
  held: transport.Delivered


@dataclasses.dataclass(frozen=True)
class Toy(base.SensorBase):
  adr: int                       # sensordata address of the gyro

  type = TOY
  sample_type = 'test/registry_toy_sample/v1'
  params_type = ToyParams

  def init(self, params, world_key):
    streams = {s: rng.stream_key(world_key, self.id, s)
               for s in ('noise', 'delivery_jitter', 'delivery_loss')}
    return ToyState(streams, *transport.init(self.transport, ToySample(jnp.float32(0.0))))

  def acquire(self, p, s, data, tick, n):
    y = data.sensordata[self.adr + 2]
    if self._on('offset'):
      y = y + p.offset
    if self._on('noise_stddev'):
      y = y + p.noise_stddev * rng.normal(s.streams['noise'], n)
    return s, ToySample(y)

  def truth(self, s, data):
    return {'yaw_rate': data.sensordata[self.adr + 2]}

  def describe(self):
    return self.describe_terms([f'gyro z at sensordata[{self.adr + 2}]'],
                               ('offset', 'noise_stddev'))


def build_toy(cid, raw, ctx, catalog):
  sb = base.SensorBuild(ToyConfig, TOY, cid, raw, ctx, catalog)
  gyro = ctx.sensor('gyroscope_sensor', sb.cfg.gyroscope_sensor, mujoco.mjtSensor.mjSENS_GYRO, 3)
  return sb.make(Toy, adr=gyro.adr)


def toy_metrics(sensor, truth):
  """Per world: mean error of the delivered samples against the truth at their sample tick
  (the offset, plus noise)."""
  new = sensor['new_data']
  at = np.take_along_axis(truth['yaw_rate'], np.clip(sensor['sample_tick'], 0, None), axis=1)
  err = (sensor['yaw_rate'] - at) * new
  return {'mean_error': err.sum(1) / np.maximum(new.sum(1), 1)}


def toy_plot(path, cid, time_s, sensor, truth, world, metrics, title):
  """A small PNG (a valid file is all the test needs of it)."""
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots()
  ax.plot(time_s, sensor['yaw_rate'][world])
  ax.set_title(title)
  fig.savefig(path)
  plt.close(fig)


STATIC_RIG = textwrap.dedent("""\
    <mujoco model="toy_static">
      <option timestep="0.002"/>
      <worldbody>
        <body name="plate"><joint name="yaw" type="hinge" axis="0 0 1"/>
          <geom type="box" size="0.1 0.1 0.01" mass="1"/><site name="s"/></body>
      </worldbody>
      <sensor><gyro name="gyro" site="s"/></sensor>
    </mujoco>
    """)


def toy_rig(manifest_path, cid, ctype, cfg, out, *, static_duration_s, worlds, seed, perturb,
            progress, t0):
  """`validate` for the toy: at rest the true rate is 0, so the mean delivered sample is the
  offset; checked against the configured one within 4 standard errors + float32 rounding."""
  with vcommon.staged_output(pathlib.Path(out)) as tmp:
    doc = {'fibril_manifest': 1, 'model': 'static.xml', 'components': [
        {'id': 'dut', 'type': ctype, 'config': {**cfg, **perturb, 'gyroscope_sensor': 'gyro'}}]}
    sim = fibril_mjx.load(vcommon.write_rig(tmp / 'rigs', 'static', STATIC_RIG, doc))
    n = int(round(static_duration_s / DT))
    progress(f'static toy rig: {worlds} worlds x {n} ticks')
    _, tr, _ = sim.rollout(sim.default_params(worlds), fibril_mjx.world_keys(seed, worlds), n)
    d = tr['sensor']['dut']
    y = np.asarray(d.sample.yaw_rate, np.float64)[np.asarray(d.new_data)]
    sigma = float(cfg.get('noise_stddev', 0.0))
    tol = 4.0 * sigma / math.sqrt(y.size) + 1e-6
    want = float(cfg.get('offset', 0.0))
    check = vcommon.Check('toy.offset', 'mean delivered yaw rate at rest', float(y.mean()),
                          want, tol, f'4 standard errors of {y.size} samples + 1e-6',
                          abs(y.mean() - want) <= tol)
    dev = types.SimpleNamespace(type=ctype, config=cfg)
    summary = vcommon._summary(manifest_path, cid, dev, [check], perturb, static_duration_s,
                               worlds, seed, time.time() - t0)
    vcommon._write_summary(tmp, summary)
  return summary


def toy_ros(s, header, ctx):
  """One `geometry_msgs/msg/Vector3Stamped` per sample: z = the yaw rate (rad/s)."""
  return [('yaw_rate', mcap_export.TYPES['geometry_msgs/msg/Vector3Stamped'](
      header=header, vector=mcap_export.vector3((0.0, 0.0, float(s['yaw_rate'])))))]


# ------------------------------------------------- its profile and evidence (tmp), a manifest

PROFILE = {
    'id': 'registry_toy_nominal', 'kind': 'device', 'component_types': [TOY],
    'provenance': {'source': 'a made-up part for the registry test',
                   'evidence': 'evidence/registry_toy.md',
                   'fields': {'period_s': 'ASSUMPTION: every 2 ticks',
                              'latency_s': 'ASSUMPTION: one tick',
                              'offset': 'DERIVED in the evidence note',
                              'noise_stddev': 'DERIVED in the evidence note'}},
    'fields': {'period_s': 0.004, 'latency_s': 0.002, 'offset': 0.25, 'noise_stddev': 0.01}}
EVIDENCE = ('# Registry toy\n\nOffset 0.25 rad/s and white noise 0.01 rad/s per sample: '
            'chosen for the test, read back by `fibril-mjx validate`.\n')


@pytest.fixture(scope='module')
def toy():
  """The toy type, registered with every part in one call (removed afterwards)."""
  entry = fibril_mjx.register(TOY, build=build_toy, config_model=ToyConfig, metrics=toy_metrics,
                              plot=toy_plot, validation_rig=toy_rig, ros=toy_ros)
  yield entry
  registry.unregister(TOY)


@pytest.fixture(scope='module')
def manifest(toy, tmp_path_factory):
  root = tmp_path_factory.mktemp('toy')
  (root / 'profiles' / 'evidence').mkdir(parents=True)
  (root / 'profiles' / 'registry_toy_nominal.yaml').write_text(yaml.safe_dump(PROFILE))
  (root / 'profiles' / 'evidence' / 'registry_toy.md').write_text(EVIDENCE)
  entry = {'id': 'toy', 'type': TOY, 'config': {
      'gyroscope_sensor': 'gyro', 'profiles': {'device': 'registry_toy_nominal'}}}
  return write_rig(root, [entry], extra={'profile_paths': ['profiles']})


def read_mcap(path) -> dict[str, list]:
  out: dict[str, list] = {}
  with open(path, 'rb') as f:
    reader = make_reader(f, decoder_factories=[DecoderFactory()])
    for sch, channel, message, decoded in reader.iter_decoded_messages(log_time_order=True):
      out.setdefault(channel.topic, []).append((sch.name, message.log_time, decoded))
  return out


# ------------------------------------------------- the tests

def test_one_registration_holds_every_part(toy):
  e = registry.get(TOY)
  assert e is toy and (e.build, e.config_model, e.metrics, e.plot, e.validation_rig, e.ros) == (
      build_toy, ToyConfig, toy_metrics, toy_plot, toy_rig, toy_ros)
  for part in ('build', 'config_model', 'metrics', 'plot', 'validation_rig', 'ros'):
    assert TOY in registry.types(part)
  assert (e.bag, e.profile_fit, e.mavlink) == (None, None, None)  # parts it did not give
  assert schema.component_config_models()[TOY] is ToyConfig     # `fibril-mjx schema`
  assert fibril_mjx.register is registry.register                # the one call


def test_the_package_has_one_registration_call():
  """Every registration in the package is a call of `registry.register` (`fibril_mjx.register`):
  no other function, decorator or alias defines one."""
  defs, calls = [], set()
  for p in PKG.rglob('*.py'):
    tree = ast.parse(p.read_text())
    for node in ast.walk(tree):
      if isinstance(node, ast.FunctionDef) and node.name == 'register':
        defs.append(f'{p.relative_to(PKG)}:{node.name}')
      if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
          and isinstance(node.func.value, ast.Name) and node.func.value.id == 'registry'):
        calls.add(node.func.attr)
  assert defs == ['core/registry.py:register']
  assert 'add' not in calls and 'register' in calls


def test_no_list_in_the_package_names_the_toy():
  hits = [str(p.relative_to(PKG)) for p in PKG.rglob('*.py') if TOY in p.read_text()]
  assert hits == []


def test_run_validate_and_export_mcap(manifest, tmp_path, capsys, monkeypatch):
  monkeypatch.setenv('FIBRIL_MJX_NO_PROGRESS', '1')
  run = tmp_path / 'run'
  assert cli.main(['run', str(manifest), '--worlds', '3', '--duration', '0.1',
                   '--trace-worlds', '3', '--out', str(run)]) == 0
  # run: the toy's metrics in the summary, its plot, its fields from the device profile
  summary = json.loads((run / 'summary.json').read_text())
  comp = summary['components']['toy']
  assert comp['type'] == TOY
  with np.load(run / 'trace.npz') as z:
    trace = {k: z[k] for k in z.files}
  new = trace['sensor/toy/new_data'].astype(bool)
  truth, st = trace['truth/toy/yaw_rate'], trace['sensor/toy/sample_tick']
  per_world = [np.mean([trace['sensor/toy/yaw_rate'][w, t] - truth[w, st[w, t]]
                        for t in np.flatnonzero(new[w])]) for w in range(3)]
  assert (trace['sensor/toy/arrival_tick'] - st)[new].tolist() == [1] * new.sum()  # latency
  assert comp['metrics']['mean_error']['mean'] == pytest.approx(np.mean(per_world), abs=1e-6)
  assert comp['metrics']['mean_error']['mean'] == pytest.approx(
      0.25, abs=4 * 0.01 / math.sqrt(new.sum()))
  assert (run / 'toy.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  meta = json.loads((run / 'meta.json').read_text())
  fields = meta['components']['toy']['fields']
  assert fields['offset'] == {'value': 0.25, 'layer': 'device', 'source': 'registry_toy_nominal'}
  # the command line the CLI was given (the library reads no sys.argv)
  assert meta['command'] == ['fibril-mjx', 'run', str(manifest), '--worlds', '3', '--duration',
                             '0.1', '--trace-worlds', '3', '--out', str(run)]

  # validate: the toy's rig, its check line, and a perturbed device caught
  capsys.readouterr()
  assert cli.main(['validate', str(manifest), '--component', 'toy', '--out',
                   str(tmp_path / 'v'), '--static-duration', '2', '--worlds', '4']) == 0
  text = capsys.readouterr().out
  assert f'validate toy ({TOY})' in text and 'PASS  toy.offset' in text
  v = json.loads((tmp_path / 'v' / 'summary.json').read_text())
  assert v['passed'] and [c['name'] for c in v['checks']] == ['toy.offset']
  assert (tmp_path / 'v' / 'rigs' / 'static.yaml').is_file()
  assert cli.main(['validate', str(manifest), '--component', 'toy', '--out',
                   str(tmp_path / 'v2'), '--static-duration', '2', '--worlds', '4',
                   '--perturb', 'offset=0.3']) == 1
  assert 'FAIL  toy.offset' in capsys.readouterr().out

  # export-mcap: the toy's messages, one per delivered sample, stamped at its sample tick
  out = tmp_path / 'run.mcap'
  assert cli.main(['export-mcap', str(run), '--out', str(out)]) == 0
  assert 'warning' not in capsys.readouterr().err        # the toy is mapped, not skipped
  got = read_mcap(out)
  for w in range(2):
    msgs = got[f'/world_{w:04d}/toy/yaw_rate']
    ticks = np.flatnonzero(new[w] & trace['sensor/toy/valid'][w])
    assert len(msgs) == len(ticks) > 0
    for t, (name, log_ns, m) in zip(ticks, msgs):
      assert name == 'geometry_msgs/msg/Vector3Stamped'
      assert m.header.stamp.sec * 10 ** 9 + m.header.stamp.nanosec == round(
          int(trace['sensor/toy/sample_tick'][w, t]) * DT * 1e9)
      assert log_ns == round(int(trace['sensor/toy/arrival_tick'][w, t]) * DT * 1e9)
      assert m.vector.z == np.float64(trace['sensor/toy/yaw_rate'][w, t])


def test_registering_twice_is_an_error_naming_the_type(toy):
  with pytest.raises(ValueError, match=f"component type '{TOY}' is already registered with a "
                     rf"build \(by {__name__}\); pass replace=True to replace it$"):
    fibril_mjx.register(TOY, build=build_toy)
  with pytest.raises(ValueError, match=r"component type 'fibril_sim/imu' is already registered "
                     r"with a build \(by fibril_mjx\.components\.sensors\.imu\)"):
    fibril_mjx.register('fibril_sim/imu', build=build_toy)
  with pytest.raises(ValueError, match=f"'{TOY}' is already registered with a metrics"):
    fibril_mjx.register(TOY, metrics=toy_metrics)
  with pytest.raises(ValueError, match=rf"component type '{TOY}': unknown part\(s\) rigs "
                     r"\(parts: build, config_model, metrics, plot, validation_rig, ros, bag, "
                     r"profile_fit, mavlink, assembly_channels\)$"):
    fibril_mjx.register(TOY, rigs=toy_rig)
  assert registry.get(TOY) is toy                     # nothing changed


def test_parts_add_up_and_replace_replaces_only_those_given(toy):
  """A later call adds parts to the entry; `replace=True` replaces the parts it names."""
  try:
    e = fibril_mjx.register('test/parts', metrics=toy_metrics)
    assert (e.build, e.metrics) == (None, toy_metrics)
    assert 'test/parts' not in registry.types()      # no build: not a manifest type
    e = fibril_mjx.register('test/parts', build=build_toy, config_model=ToyConfig)
    assert (e.build, e.config_model, e.metrics) == (build_toy, ToyConfig, toy_metrics)
    e = fibril_mjx.register('test/parts', metrics=len, replace=True)
    assert (e.build, e.metrics) == (build_toy, len)
  finally:
    registry.unregister('test/parts')


def test_unknown_type_lists_the_registered_ones(toy, tmp_path):
  path = write_rig(tmp_path, [{'id': 'x', 'type': 'test/registry_tyo', 'config': {}}])
  known = ', '.join(registry.types())
  assert TOY in known and 'fibril_sim/imu' in known
  with pytest.raises(ConfigError, match=r"components\[0\]\.type = 'test/registry_tyo': unknown "
                     rf"component type \(did you mean '{TOY}'\?\); known types: {known}$"):
    fibril_mjx.load(path)


def test_builtin_types_register_every_part_they_have():
  """Each layer's modules, found by walking their folders, registered their parts."""
  nav = ('fibril_sim/magnetometer', 'fibril_sim/barometer', 'fibril_sim/airspeed',
         'fibril_sim/rangefinder')
  assert set(registry.types('validation_rig')) >= {
      'fibril_sim/imu', 'fibril_sim/ahrs', 'fibril_sim/gnss', 'fibril_sim/optical_flow',
      'fibril_sim/lidar', 'fibril_sim/camera', *nav}
  builtin = [t for t in registry.types() if t.startswith(('fibril_sim/', 'fibril_mjx/'))]
  assert len(builtin) >= 14
  for t in builtin:
    e = registry.get(t)
    assert e.config_model is not None and e.metrics is not None and e.plot is not None, t
  assert {'fibril_sim/imu', 'fibril_sim/gnss', 'fibril_sim/motor'} <= set(registry.types('ros'))
  assert registry.types('profile_fit') == ['fibril_sim/ahrs', 'fibril_sim/imu']
  assert registry.types('bag') == ['fibril_sim/airspeed']
  # what validate needs of a type is a record in its entry, read by name
  assert registry.get('fibril_sim/rangefinder').validation_rig.range == ('min_range_m',
                                                                        'max_range_m')
  assert registry.get('fibril_sim/ahrs').validation_rig.orientation is True
  assert registry.get('fibril_sim/imu').validation_rig.orientation is False


def test_discover_imports_a_new_module_of_a_folder(tmp_path, monkeypatch):
  """A module dropped into a walked folder registers itself: no list to extend."""
  pkg = tmp_path / 'toy_plugins'
  (pkg / 'inner').mkdir(parents=True)
  (pkg / '__init__.py').write_text('')
  (pkg / 'inner' / '__init__.py').write_text('')
  (pkg / 'inner' / 'thermo.py').write_text(
      'from fibril_mjx.core import registry\n'
      "registry.register('test/discovered', metrics=lambda sensor, truth: {})\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  import toy_plugins
  try:
    assert 'test/discovered' not in registry.types('metrics')
    registry.discover(toy_plugins)
    registry.discover(toy_plugins)                   # again: modules are imported once
    assert 'test/discovered' in registry.types('metrics')
    assert 'test/discovered' not in registry.types()  # no build: not a manifest type
  finally:
    registry.unregister('test/discovered')
    for name in [m for m in sys.modules if m.startswith('toy_plugins')]:
      del sys.modules[name]
