"""A recorded state log may carry `qacc`: a prescribed motion then has its exact accelerometer.

Reference outside the code under test: the closed-form specific force of a point on a pendulum
spun about the vertical, θ(t) = A·sin(Ωt), at radius r: (−r·θ̇², r·θ̈, g) in the arm's frame.
Without `qacc` the frames take MuJoCo's forward dynamics of the free hinge (θ̈ = 0), which
misses the tangential term; the CLI accepts `--physics trajectory`.
"""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from fibril_mjx import cli
from fibril_mjx.batch import physics_c
from fibril_mjx.errors import ConfigError
from fibril_mjx.io import trajectory as traj_io

R, A, OMEGA, G, DT = 0.2, 0.8, 2 * np.pi * 1.3, 9.81, 0.002
XML = f"""<mujoco><option timestep="{DT}" gravity="0 0 -{G}"/><worldbody><body>
<joint type="hinge" axis="0 0 1"/><geom type="sphere" size="0.01" pos="{R} 0 0" mass="0.1"/>
<site name="s" pos="{R} 0 0"/></body></worldbody>
<sensor><accelerometer site="s"/></sensor></mujoco>"""


def _motion(n):
  t = np.arange(n) * DT
  th = A * np.sin(OMEGA * t)
  return th[:, None], (A * OMEGA * np.cos(OMEGA * t))[:, None], \
      (-A * OMEGA ** 2 * np.sin(OMEGA * t))[:, None]


def _closed_form(qvel, qacc):
  return np.column_stack([-R * qvel[:, 0] ** 2, R * qacc[:, 0], np.full(qvel.shape[0], G)])


def test_a_log_with_qacc_gives_the_exact_specific_force(tmp_path):
  m = mujoco.MjModel.from_xml_string(XML)
  qpos, qvel, qacc = _motion(400)
  np.savez(tmp_path / 'log.npz', qpos=qpos, qvel=qvel, qacc=qacc)
  log = traj_io.load(tmp_path / 'log.npz', m)
  np.testing.assert_array_equal(log['qacc'], qacc)
  ctrl = np.zeros((qpos.shape[0], 0))
  exact = physics_c.frames_from_log(m, log['qpos'], log['qvel'], ctrl, qacc=log['qacc'])
  want = _closed_form(qvel, qacc)
  # float32 frames: relative rounding of the largest component (g)
  np.testing.assert_allclose(np.asarray(exact.sensordata, np.float64), want, rtol=0,
                             atol=2e-6 * G)
  forward = physics_c.frames_from_log(m, log['qpos'], log['qvel'], ctrl)
  tangential = np.asarray(forward.sensordata)[:, 1]
  assert np.abs(tangential).max() < 1e-5          # the free hinge's own θ̈ = 0
  assert np.abs(want[:, 1]).max() > 0.5 * R * A * OMEGA ** 2


def test_a_log_with_a_qacc_of_the_wrong_width_names_the_field(tmp_path):
  m = mujoco.MjModel.from_xml_string(XML)
  qpos, qvel, _ = _motion(10)
  np.savez(tmp_path / 'log.npz', qpos=qpos, qvel=qvel, qacc=np.zeros((10, 2)))
  with pytest.raises(ConfigError) as e:
    traj_io.load(tmp_path / 'log.npz', m)
  assert str(e.value) == f'{tmp_path / "log.npz"}: qacc = [10, 2]: expected shape (10, 1) for ' \
                         'this model'


def test_the_cli_accepts_physics_trajectory_and_asks_for_the_log(tmp_path, capsys):
  """`--physics trajectory` is a choice the parser knows; without `--trajectory` it is the
  one-line error `physics_c.choose` gives (exit 2), not argparse's "invalid choice"."""
  (tmp_path / 'm.xml').write_text(XML)
  (tmp_path / 'm.yaml').write_text('fibril_manifest: 1\nmodel: m.xml\ncomponents: []\n')
  code = cli.main(['run', str(tmp_path / 'm.yaml'), '--physics', 'trajectory', '--out',
                   str(tmp_path / 'o')])
  err = capsys.readouterr().err.strip().splitlines()
  assert code == 2 and err == ["error: physics 'trajectory' needs a state log: --trajectory LOG"]
