"""Round trip of the vibration line: `fibril_sim/imu` simulating a narrowband process
(`<channel>_narrowband_*`, values chosen here) on a static rig, then `fit-profile` on its
recordings finds the line and fits it. Tolerances from the sample size, not from the fit: the
power of a narrowband Gaussian process measured over T seconds has a relative std of about
1/√(πBT); the centre is within the bandwidth; the held-out log agrees (exit 0)."""

import json
import math

import numpy as np
import pytest
import yaml

from fibril_mjx.io import recording as rc

PERIOD, WORLDS, SECONDS = 0.005, 3, 30.0
TRUE = {
    'angular_velocity_noise_density': [3e-4, 3e-4, 3e-4],
    'angular_velocity_narrowband_stddev': [0.0, 0.0, 0.02],
    'angular_velocity_narrowband_frequency_hz': [0.0, 0.0, 12.0],
    'angular_velocity_narrowband_bandwidth_hz': [0.0, 0.0, 0.5],
    'linear_acceleration_noise_density': [2e-3, 2e-3, 2e-3],
}


@pytest.fixture(scope='module')
def recordings(tmp_path_factory):
  import fibril_mjx
  from fibril_mjx.workflows import validate
  from fibril_mjx.workflows.validate import common
  d = tmp_path_factory.mktemp('nb')
  dev = validate.inertial.device_from_config('imu', 'fibril_sim/imu', {'period_s': PERIOD})
  # validate's static rig places its one device on each pose in turn (a group of WORLDS worlds
  # per pose); the logs are the pz group's, the device's samples under the name `pz`
  xml, doc, places = validate.inertial.static_rig(dev, dict(TRUE))
  sim = common.rig_simulation(common.write_rig(d, 'static', xml, doc), placed=True)
  nw = len(places) * WORLDS
  _, trace, _ = sim.rollout(sim.default_params(nw), fibril_mjx.world_keys(5, nw),
                            int(SECONDS / PERIOD),
                            model=common.placements(sim.mj_model, list(places.values()), WORLDS))
  first = list(places).index('pz') * WORLDS
  out = []
  for w in range(WORLDS):
    r = rc.recording_from_trace(trace, first + w, sim=sim)
    r = rc.Recording({'pz': r.sensors[common.DUT]}, meta=r.meta)
    out.append(rc.write_recording(d / f'w{w}.npz', r))
  return out


def test_simulated_line_is_found_and_fitted(recordings, tmp_path, capsys):
  from fibril_mjx import cli
  out = tmp_path / 'p.yaml'
  rc_ = cli.main(['fit-profile', '--type', 'fibril_sim/imu', '--component', 'pz', '--static',
                  *map(str, recordings), '--out', str(out)])
  text = capsys.readouterr().out
  assert rc_ == 0, text
  f = yaml.safe_load(out.read_text())['fields']
  res = json.loads((tmp_path / 'p_fit.json').read_text())
  t_fit = (WORLDS - 1) * SECONDS            # the last log is held out
  bw, s, f0 = 0.5, 0.02, 12.0
  assert f['angular_velocity_narrowband_frequency_hz'][2] == pytest.approx(f0, abs=bw)
  assert f['angular_velocity_narrowband_stddev'][2] == pytest.approx(
      s, rel=5 / math.sqrt(math.pi * bw * t_fit))
  assert 0 < f['angular_velocity_narrowband_bandwidth_hz'][2] < 4 * bw
  # the white density is not inflated by the line: within 4 x the closed-form bound of a
  # density from m samples (2/sqrt(m), as test_fit_profile.py)
  m = t_fit / PERIOD
  assert abs(f['angular_velocity_noise_density'][2] / 3e-4 - 1) < 4 * 2 / math.sqrt(m)
  # no line on the axes without one
  assert not f.get('angular_velocity_narrowband_stddev', [0, 0, 0])[0]
  assert all(a['agrees'] for a in res['verdict'])
