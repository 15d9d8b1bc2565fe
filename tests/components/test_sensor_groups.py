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
from ref_helpers import write_manifest

# three hinged arms, each with a site off its axis; driven apart by raw ctrl sines
XML = """<mujoco model="sensor_groups"><option timestep="0.002"/>
  <worldbody>
    <body><joint name="a" type="hinge" axis="0 0 1" damping="0.05"/>
      <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="0.5" contype="0"
            conaffinity="0"/><site name="sa" pos="0.2 0 0"/></body>
    <body pos="1 0 0"><joint name="b" type="hinge" axis="0 1 0" damping="0.1"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="0.4" contype="0"
            conaffinity="0"/><site name="sb" pos="0.3 0 0" euler="0.3 0 0"/></body>
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


def _imus(tmp):
  """Two IMUs alike but for their site (a group), a third with another noise (alone)."""
  imu = lambda cid, site, **kw: {'id': cid, 'type': 'fibril_sim/imu',  # noqa: E731
                                 'config': {**IMU, 'site': site, **kw}}
  comps = [imu('ia', 'sa'), imu('ib', 'sb'),
           imu('ic', 'sc', angular_velocity_noise_density=[0.02] * 3)]
  return fibril_mjx.load(write_manifest(tmp, XML, comps, **DRIVE))


def _run(sim):
  p = sim.default_params(2)
  st = sim.reset(p, fibril_mjx.world_keys(5, 2))
  return sim.run(p, st, 30)[:2]


def test_imus_on_different_sites_group_and_the_plan_says_so(tmp_path):
  sim = _imus(tmp_path)
  assert [g.ids for g in sim.built.sensing_groups] == [('ia', 'ib'), ('ic',)]
  assert 'fibril_sim/imu x 2 (ia, ib): one step with a member axis' in plan.render(sim)


def test_a_grouped_imu_run_is_bitwise_the_run_one_by_one(tmp_path, monkeypatch):
  """Samples (with the delta outputs: the site's orientation and velocity probes per member),
  truth and final state of the grouped run equal to those of each IMU stepped alone."""
  grouped = _imus(tmp_path / 'grouped')
  assert grouped.built.stacked_groups[0].ids == ('ia', 'ib')   # formed now, before the patch
  monkeypatch.setattr(groups, 'form', _alone)
  alone = _imus(tmp_path / 'alone')
  assert not alone.built.stacked_groups
  (a_state, a_trace), (b_state, b_trace) = _run(grouped), _run(alone)
  assert set(a_trace['sensor']) == {'ia', 'ib', 'ic'}
  for x, y in zip(jax.tree.leaves((a_state, a_trace)), jax.tree.leaves((b_state, b_trace)),
                  strict=True):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  ga, gb = (np.asarray(a_trace['truth'][i]['angular_velocity']) for i in ('ia', 'ib'))
  assert np.abs(ga - gb).max() > 1.0   # each member reads its own site's sensors
  da, db = (np.asarray(a_trace['sensor'][i].sample.delta_velocity) for i in ('ia', 'ib'))
  assert np.abs(da - db).max() > 1e-4
