"""The actuator types beside `fibril_sim/motor` that step as one group (`core/groups.py`):
`fibril_sim/scalar_actuator`, `fibril_sim/position_servo` and `fibril_sim/motion_motor`, two
members each, alike but for their bindings (actuator, joint, gear, mass-matrix address, joint
force limit), with and without faults on their feedback (`feedback_faults:`; their windows per
member and per world). Reference: the same manifest with every component a group of one."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fibril_mjx
from fibril_mjx.batch.simulation import Controller
from fibril_mjx.components.actuators import motion_motor as mm
from fibril_mjx.components.actuators import position_servo as ps
from fibril_mjx.components.actuators import scalar_actuator as sa
from fibril_mjx.core import groups
from fibril_mjx.workflows import plan
from ref_helpers import per_id, write_manifest

BAR = '<geom type="capsule" fromto="0 0 0 {l} 0 0" size="0.02" mass="{m}"/>'
XML = f"""<mujoco model="act_groups">
  <compiler angle="radian"/>
  <option timestep="0.002"/>
  <include file="package://fibril_sim_models/mujoco/actuator_presets.xml"/>
  <default><geom contype="0" conaffinity="0"/><joint damping="0.05"/></default>
  <worldbody>
    <body><joint name="js1" type="slide" axis="1 0 0"/>{BAR.format(l=0.1, m=1)}</body>
    <body pos="1 0 0"><joint name="js2" type="slide" axis="1 0 0"/>{BAR.format(l=0.1, m=2)}</body>
    <body pos="2 0 0"><joint name="jv1" type="hinge" axis="0 1 0"/>{BAR.format(l=0.2, m=0.5)}</body>
    <body pos="3 0 0"><joint name="jv2" type="hinge" axis="0 1 0"/>{BAR.format(l=0.3, m=0.7)}</body>
    <body pos="4 0 0"><joint name="jm1" type="hinge" axis="0 1 0" actuatorfrcrange="-3 3"/>
      {BAR.format(l=0.25, m=1)}</body>
    <body pos="5 0 0"><joint name="jm2" type="hinge" axis="0 1 0" actuatorfrcrange="-4 4"/>
      {BAR.format(l=0.2, m=0.8)}</body>
  </worldbody>
  <actuator>
    <motor name="as1" joint="js1"/>
    <motor name="as2" joint="js2" gear="2"/>
    <motor name="sv1" joint="jv1"/>
    <motor name="sv2" joint="jv2" gear="3"/>
    <position name="m1p" class="fibril_sim_hw_robstride_operation_position" joint="jm1"/>
    <velocity name="m1v" class="fibril_sim_hw_robstride_operation_velocity" joint="jm1"/>
    <motor name="m1f" class="fibril_sim_hw_robstride_operation_feedforward" joint="jm1"/>
    <position name="m2p" class="fibril_sim_hw_robstride_operation_position" joint="jm2" gear="2"/>
    <velocity name="m2v" class="fibril_sim_hw_robstride_operation_velocity" joint="jm2" gear="2"/>
    <motor name="m2f" class="fibril_sim_hw_robstride_operation_feedforward" joint="jm2" gear="2"/>
  </actuator>
</mujoco>"""

LINK = dict(application_period_s=0.004, command_latency_s=0.002, command_jitter_s=0.0005,
            command_loss_probability=0.1, timeout_s=0.02, feedback_period_s=0.004,
            feedback_latency_s=0.002, feedback_jitter_s=0.0005, feedback_loss_probability=0.2,
            feedback_current_per_force=0.5)
# a stuck (held), a bias ramp, a dropout and a stale packet on the feedback: what depends on the
# packets sent before and on the per-world windows
FEEDBACK_FAULTS = [{'type': 'stuck', 'start_s': 0.021, 'end_s': 0.041, 'fields': ['position']},
                   {'type': 'bias_ramp', 'start_s': 0.031, 'end_s': 0.081, 'value': 2.0,
                    'fields': ['velocity', 'current']},
                   {'type': 'dropout', 'start_s': 0.091, 'end_s': 0.111},
                   {'type': 'stale_old_timestamp', 'start_s': 0.121, 'end_s': 0.131}]


def _components(feedback_faults=()):
  link = {**LINK, **({'feedback_faults': list(feedback_faults)} if feedback_faults else {})}
  scalar = lambda cid, a: {'id': cid, 'type': 'fibril_sim/scalar_actuator',  # noqa: E731
                           'config': {'actuator': a, 'latency_s': 0.002, 'timeout_s': 0.02,
                                      'application_period_s': 0.004, 'deadband': 0.01,
                                      'saturation_min': -0.5, 'saturation_max': 0.5}}
  servo = lambda cid, a: {'id': cid, 'type': 'fibril_sim/position_servo',  # noqa: E731
                          'config': {'actuator': a, 'friction_coulomb': 0.02,
                                     'torque_limit': 1.0, **link}}
  motion = lambda cid, j: {'id': cid, 'type': 'fibril_sim/motion_motor',  # noqa: E731
                           'config': {'joint': f'j{j}', 'position_actuator': f'{j}p',
                                      'velocity_actuator': f'{j}v',
                                      'feedforward_actuator': f'{j}f', **link}}
  return [scalar('sa', 'as1'), scalar('sb', 'as2'), servo('va', 'sv1'), servo('vb', 'sv2'),
          motion('ma', 'm1'), motion('mb', 'm2')]


def policy(obs, k):
  """Sines per component, from the tick count `k`."""
  t = k.astype(jnp.float32) * 0.002
  s = jnp.sin(2 * jnp.pi * 3.0 * t)
  return {'sa': sa.command(0.8 * s), 'sb': sa.command(-0.6 * s),
          'va': ps.command(0.5 * s, 400.0, 5.0), 'vb': ps.command(-0.4 * s, 300.0, 4.0),
          'ma': mm.command(0.3 * s, 0.0, 8.0, 0.3, 0.1),
          'mb': mm.command(-0.2 * s, 0.0, 6.0, 0.2, -0.1)}, k + 1


def _alone(components, role_filter):
  return tuple(groups.Group((cid,), c, ()) for cid, c in components.items() if role_filter(c))


def _params(sim):
  """Default Params; with feedback faults, the dropout window of `vb` and `mb` per world."""
  p = sim.default_params(2)
  for cid in ('vb', 'mb'):
    c = sim.components[cid]
    if c.feedback_fault_plan is not None:
      p[cid] = c.set_param(p[cid], 'feedback_faults[2].start_s', jnp.asarray([0.085, 0.101]))
  return p


def _rollout(sim):
  final, trace, _ = sim.rollout(_params(sim), fibril_mjx.world_keys(5, 2), 80,
                                controller=Controller(policy, init=jnp.int32(0)))
  return per_id(sim.built, final, axis=1), trace


@pytest.fixture(scope='module', params=[(), FEEDBACK_FAULTS], ids=['plain', 'feedback_faults'])
def grouped(tmp_path_factory, request):
  return fibril_mjx.load(write_manifest(tmp_path_factory.mktemp('g'), XML,
                                        _components(request.param)))


def test_members_alike_but_for_bindings_group_and_the_plan_says_so(grouped):
  assert [g.ids for g in grouped.built.actuator_groups] == [('sa', 'sb'), ('va', 'vb'),
                                                             ('ma', 'mb')]
  text = plan.render(grouped)
  for kind, ids in (('scalar_actuator', 'sa, sb'), ('position_servo', 'va, vb'),
                    ('motion_motor', 'ma, mb')):
    assert f'fibril_sim/{kind} x 2 ({ids}): one step with a member axis' in text


def test_grouped_rollout_is_bitwise_each_member_alone(grouped, tmp_path, monkeypatch):
  """Commands through jitter and loss, feedback through jitter, loss (and faults), per-member
  gears, addresses and limits: every leaf of the final state and of the trace (sensor =
  feedback, truth, ctrl) equal to the rollout with every component a group of one."""
  faults = FEEDBACK_FAULTS if grouped.components['va'].feedback_fault_plan else ()
  assert len(grouped.built.stacked_groups) == 3   # formed (and cached) before the patch below
  monkeypatch.setattr(groups, 'form', _alone)
  alone = fibril_mjx.load(write_manifest(tmp_path, XML, _components(faults)))
  assert not alone.built.stacked_groups
  a, b = _rollout(grouped), _rollout(alone)
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  truth = a[1]['truth']
  for p, q in (('sa', 'sb'), ('va', 'vb'), ('ma', 'mb')):   # members read their own bindings
    key = 'applied' if p == 'sa' else 'position'
    assert np.abs(np.asarray(truth[p][key]) - np.asarray(truth[q][key])).max() > 1e-3
  if faults:   # the faults act, and world by world (vb, mb: their own dropout windows)
    status = {cid: grouped.components[cid].status(a[0].components[cid])
              for cid in ('va', 'vb', 'ma', 'mb')}
    for cid in ('va', 'ma'):
      assert np.asarray(status[cid]['feedback_fault_dropped']).tolist() == [5, 5]
    for cid in ('vb', 'mb'):
      assert np.asarray(status[cid]['feedback_fault_dropped']).tolist() == [6, 2]
