"""Probe sensors (`fibril_mjx.core.context`): the hidden MuJoCo sensors through which components
read physics. Reference: MuJoCo C's own `site_xpos` / `site_xmat` / `geom_xpos` / `qpos` after
`mj_forward` of a model compiled with the probes."""

import mujoco
import numpy as np
import pytest

from fibril_mjx.core.context import PROBE_PREFIX, BuildContext, ProbeSet

XML = """<mujoco><worldbody>
  <body name="b" pos="0.1 0.2 1"><freejoint/><geom size=".1"/>
    <site name="s" pos="0.05 0 0" euler="10 20 30"/>
    <body pos="0 0 0.1"><joint name="h" type="hinge" axis="0 1 0"/><geom type="box" size=".1 .1 .1"/></body>
  </body></worldbody>
  <sensor><gyro name="g" site="s"/></sensor></mujoco>"""


def _probed():
  raw = mujoco.MjModel.from_xml_string(XML)
  ctx = BuildContext(raw, 0.002, 'm.yaml', 'components[0].config', probes=ProbeSet(raw))
  return raw, ctx


def test_probes_read_what_mujoco_computed_and_sit_after_the_user_sensors():
  raw, ctx = _probed()
  pose, joint = ctx.site_pose(0), ctx.joint_probe(1)
  box = ctx.geom_pose(1)    # unnamed: given a hidden name
  assert box.site == f'{PROBE_PREFIX}geom1'
  assert ctx.site_pose(0) == pose              # asked twice, one set of sensors
  m = ctx.probes.compile(mujoco.MjSpec.from_string(XML))
  assert m.nsensordata == raw.nsensordata + ctx.probes.size
  assert pose.position.adr == raw.nsensordata   # user sensors keep their addresses
  d = mujoco.MjData(m)
  rng = np.random.default_rng(0)
  d.qpos[:] = rng.normal(size=m.nq)
  d.qpos[3:7] /= np.linalg.norm(d.qpos[3:7])
  d.qvel[:] = rng.normal(size=m.nv)
  mujoco.mj_forward(m, d)
  np.testing.assert_array_equal(pose.pos(d), d.site_xpos[0])
  np.testing.assert_array_equal(np.asarray(pose.mat(d)),   # jnp.stack: float32, as MJX runs
                                d.site_xmat[0].reshape(3, 3).astype(np.float32))
  np.testing.assert_array_equal(np.asarray(box.mat(d)),
                                d.geom_xmat[1].reshape(3, 3).astype(np.float32))
  np.testing.assert_array_equal(box.pos(d), d.geom_xpos[1])
  q, v = joint.state(d)
  assert q == d.qpos[m.jnt_qposadr[1]] and v == d.qvel[m.jnt_dofadr[1]]


def test_a_probe_read_on_data_without_its_sensors_is_a_clear_error():
  raw, ctx = _probed()
  pose = ctx.site_pose(0)
  d = mujoco.MjData(raw)     # the model as the user wrote it, no probes compiled in
  with pytest.raises(ValueError, match='run on the model the builder compiled'):
    pose.pos(d)
