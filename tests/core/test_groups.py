"""Components of one type step as one group (`fibril_mjx.core.groups`, issue #64): which
components group, and a grouped step bitwise equal to the same components stepped one by one."""

from __future__ import annotations

import jax
import numpy as np

import fibril_mjx
from fibril_mjx.core import groups, pipeline
from fibril_mjx.workflows import plan
from actuator_rig import motor, write
from ref_helpers import per_id
from fibril_mjx.batch.simulation import Options

# three hinges: two <motor> of different gears, one <velocity>
XML = """<mujoco model="group_rig"><option timestep="0.002"/>
  <worldbody>
    <body><joint name="a" type="hinge" axis="0 0 1" damping="0.05"/>
      <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="0.5" contype="0"
            conaffinity="0"/></body>
    <body pos="1 0 0"><joint name="b" type="hinge" axis="0 0 1" damping="0.1"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="0.4" contype="0"
            conaffinity="0"/></body>
    <body pos="2 0 0"><joint name="c" type="hinge" axis="0 0 1" damping="0.05"/>
      <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="0.5" contype="0"
            conaffinity="0"/></body>
  </worldbody>
  <actuator><motor name="ma" joint="a" gear="3"
    forcerange="-1 1" forcelimited="true"/><motor name="mb" joint="b" gear="7"
    forcerange="-2 2" forcelimited="true"/><velocity name="vc" joint="c" kv="3"/></actuator>
</mujoco>"""

NOISY = dict(command_jitter_s=0.003, command_loss_probability=0.2, feedback_period_s=0.004,
             feedback_latency_s=0.004, feedback_current_per_force=0.5, timeout_s=0.01)
SCRIPT = {'command_script': [
    {'component': 'ma', 'kind': 'effort', 'amplitude': 0.5, 'frequency_hz': 3.0},
    {'component': 'mb', 'kind': 'effort', 'amplitude': 0.8, 'frequency_hz': 2.0},
    {'component': 'vc', 'kind': 'velocity', 'amplitude': 1.0, 'frequency_hz': 1.0}]}


def _load(tmp):
  comps = [motor('ma', 'ma', **NOISY), motor('mb', 'mb', **NOISY), motor('vc', 'vc', **NOISY)]
  return fibril_mjx.load(write(tmp, comps, extra=SCRIPT, xml=XML))


def _alone(components, role_filter):
  """Every component a group of one (the step before grouping)."""
  return tuple(groups.Group((cid,), c, ()) for cid, c in components.items() if role_filter(c))


def test_same_type_and_config_group_and_the_plan_says_so(tmp_path):
  sim = _load(tmp_path)
  acts = sim.built.actuator_groups
  assert [g.ids for g in acts] == [('ma', 'mb'), ('vc',)]   # <velocity>: another trace
  ma = acts[0]
  assert ma.stacked and ma.writes.tolist() == [[0], [1]]
  skeleton, _ = groups.split(sim.components['mb'])
  assert skeleton == ma.skeleton                            # gear, forcerange: per member
  member = groups.member(ma.skeleton, [n[1] for n in ma.numbers])
  assert member.binding.gear == 7.0 and member.binding.forcerange == (-2.0, 2.0)
  assert member.binding.ctrladr == 1 and member.binding.kind == 'motor'
  text = plan.render(sim)
  assert 'fibril_sim/motor x 2 (ma, mb): one step with a member axis' in text
  assert 'vc (fibril_sim/motor): a group of one' in text


def test_grouped_step_is_bitwise_the_step_one_by_one(tmp_path, monkeypatch):
  """Jitter, loss (per-member RNG streams), a per-member gear and forcerange, timeouts:
  every leaf of the state after each tick equal to the ungrouped pipeline's."""
  grouped = _load(tmp_path / 'grouped').built
  assert grouped.stacked_groups[0].ids == ('ma', 'mb')   # formed now (cached), before the patch
  monkeypatch.setattr(groups, 'form', _alone)
  alone = _load(tmp_path / 'alone').built
  assert all(len(g.ids) == 1 for g in alone.actuator_groups)
  params, key = pipeline.default_params(grouped), fibril_mjx.world_keys(3, 1)[0]

  def rollout(built):
    step = jax.jit(lambda s: pipeline.step(built, params, s)[0])
    states = [pipeline.init(built, params, key)]
    for _ in range(60):
      states.append(step(states[-1]))
    return states
  for a, b in zip(rollout(grouped), rollout(alone), strict=True):
    assert set(a.components) == {'ma|mb', 'vc'} and set(b.components) == {'ma', 'mb', 'vc'}
    a = per_id(grouped, a)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
      np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_a_world_keeps_the_group_stacked(tmp_path):
  """`init` keeps each group's state stacked; `pack` / `unpack` round trip; `step` on the
  per-id layout gives the packed step's state, per id."""
  built = _load(tmp_path).built
  params, key = pipeline.default_params(built), fibril_mjx.world_keys(3, 1)[0]
  stacked = pipeline.init(built, params, key)
  assert set(stacked.components) == {'ma|mb', 'vc'}
  by_id = stacked._replace(components=groups.unpack(built, stacked.components))
  assert list(by_id.components) == ['ma', 'mb', 'vc']
  for a, b in zip(jax.tree.leaves(groups.pack(built, by_id.components)),
                  jax.tree.leaves(stacked.components), strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  step = jax.jit(lambda s: pipeline.step(built, params, s)[0])
  packed_params = groups.pack(built, params)
  step_packed = jax.jit(lambda s: pipeline.step(built, packed_params, s)[0])
  for _ in range(20):
    by_id, stacked = step(by_id), step_packed(stacked)
  assert set(stacked.components) == {'ma|mb', 'vc'}
  for a, b in zip(jax.tree.leaves(by_id.components),
                  jax.tree.leaves(groups.unpack(built, stacked.components)), strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_loop_without_components_runs(tmp_path):
  """No group to pack: the loop carries the empty `components` as it is."""
  sim = fibril_mjx.load(write(tmp_path, [], xml=XML))
  p = sim.default_params(2)
  st = sim.reset(p, fibril_mjx.world_keys(0, 2))
  st, _, _ = sim.run(p, st, 3, options=Options(record=False))
  assert int(st.tick) == 3


ENCODER = dict(period_s=0.004, noise_stddev_rad=0.01, resolution_rad=0.002, latency_s=0.004,
               jitter_s=0.002, loss_probability=0.1)


def _encoders(tmp):
  """Two encoders alike but for their joint (a group), a third with another noise (alone)."""
  enc = lambda cid, joint, **kw: {'id': cid, 'type': 'fibril_sim/encoder',  # noqa: E731
                                  'config': {**ENCODER, 'joint': joint, **kw}}
  comps = [enc('ea', 'a'), enc('eb', 'b'), enc('ec', 'c', noise_stddev_rad=0.02)]
  drive = {'actuator_script': [   # the joints move apart (raw ctrl, no actuator component)
      {'actuator': 'ma', 'waveform': 'sine', 'amplitude': 0.5, 'frequency_hz': 20.0},
      {'actuator': 'mb', 'waveform': 'sine', 'amplitude': -0.8, 'frequency_hz': 30.0}]}
  return fibril_mjx.load(write(tmp, comps, extra=drive, xml=XML))


def test_encoders_group_like_motors(tmp_path):
  sim = _encoders(tmp_path)
  assert [g.ids for g in sim.built.sensing_groups] == [('ea', 'eb'), ('ec',)]
  assert [g.key for g in sim.built.stacked_groups] == ['ea|eb']
  assert _load(tmp_path / 'motors').built.stacked_groups[0].key == 'ma|mb'   # listed once
  assert 'fibril_sim/encoder x 2 (ea, eb): one step with a member axis' in plan.render(sim)


def test_a_grouped_run_is_bitwise_the_run_one_by_one(tmp_path, monkeypatch):
  """`Simulation.run` (the loop carrying the encoders' group stacked) against
  the same manifest with every component a group of one: every leaf of the recorded trace and
  of the final state equal."""
  grouped = _encoders(tmp_path / 'grouped')
  assert grouped.built.stacked_groups[0].ids == ('ea', 'eb')   # formed now, before the patch
  monkeypatch.setattr(groups, 'form', _alone)
  alone = _encoders(tmp_path / 'alone')
  assert not alone.built.stacked_groups

  def run(sim):
    p = sim.default_params(2)
    st = sim.reset(p, fibril_mjx.world_keys(5, 2))
    return sim.run(p, st, 30)[:2]
  (a_state, a_trace), (b_state, b_trace) = run(grouped), run(alone)
  assert set(a_trace['sensor']) == {'ea', 'eb', 'ec'}
  assert set(a_state.components) == {'ea|eb', 'ec'}   # kept stacked between calls
  a_state = per_id(grouped.built, a_state, axis=1)
  for x, y in zip(jax.tree.leaves((a_state, a_trace)), jax.tree.leaves((b_state, b_trace)),
                  strict=True):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  qa, qb = (np.asarray(a_trace['truth'][e]['position']) for e in ('ea', 'eb'))
  assert np.abs(qa - qb).max() > 10 * ENCODER['resolution_rad']   # members read their own joint


def test_a_binding_dataclass_must_say_what_shapes_the_trace():
  import dataclasses

  @dataclasses.dataclass(frozen=True)
  class Where:
    adr: int

  @dataclasses.dataclass(frozen=True)
  class Thing:
    id: str
    where: Where
    per_member = ('where',)
    labels = ('id',)
    member_config = ()
  try:
    groups.split(Thing('t', Where(3)))
  except TypeError as e:
    assert str(e) == ('Where is in a per_member field of a component but does not declare '
                      '`shaping` (the names of its fields that shape the trace, () for none; '
                      'see fibril_mjx/core/groups.py)')
  else:
    raise AssertionError('no error')


def test_a_world_latency_reaches_one_member_of_a_group(tmp_path, monkeypatch):
  """A per-world latency for one member (`init(..., latency=)`): the grouped init gives that
  member, and only it, the latency; every leaf equal to the ungrouped init's, and the same
  after 40 ticks."""
  grouped = _load(tmp_path / 'grouped').built
  assert grouped.stacked_groups[0].ids == ('ma', 'mb')
  monkeypatch.setattr(groups, 'form', _alone)
  alone = _load(tmp_path / 'alone').built
  params, key = pipeline.default_params(grouped), fibril_mjx.world_keys(4, 1)[0]
  latency = {'mb': {'feedback_latency_s': (jax.numpy.float32(0.01), jax.numpy.int32(5))}}

  def rollout(built):
    step = jax.jit(lambda s: pipeline.step(built, params, s)[0])
    st = pipeline.init(built, params, key, pipeline.WorldStart(latency=latency))
    first = st
    for _ in range(40):
      st = step(st)
    return [per_id(built, s) for s in (first, st)]
  nominal = pipeline.init(alone, params, key)
  for a, b in zip(rollout(grouped), rollout(alone), strict=True):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
      np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  first = rollout(grouped)[0].components
  differs = lambda cid: any(np.any(np.asarray(x) != np.asarray(y)) for x, y in zip(  # noqa
      jax.tree.leaves(first[cid]), jax.tree.leaves(nominal.components[cid])))
  assert differs('mb') and not differs('ma')


def test_a_members_id_in_init_names_streams_and_refuses_to_be_formatted(tmp_path):
  """In a group's init the member's `id` is its id's hash: `rng.stream_key` gives the key the
  id itself gives; text made of it (alike for every member) is refused."""
  from fibril_mjx.mechanisms import rng
  g = _load(tmp_path).built.stacked_groups[0]
  key = fibril_mjx.world_keys(3, 1)[0]
  m = groups.member(g.skeleton, [n[1] for n in g.numbers], g.id_hashes[1])
  np.testing.assert_array_equal(np.asarray(rng.stream_key(key, m.id, 'command_loss')),
                                np.asarray(rng.stream_key(key, 'mb', 'command_loss')))
  message = ("a grouped component's init reads its id only through "
             'rng.stream_key(world_key, self.id, source) (fibril_mjx/core/groups.py)')
  for text in (lambda: f'{m.id}', lambda: str(m.id), lambda: 'x/' + m.id):
    try:
      text()
    except TypeError as e:
      assert str(e) == message or 'MemberId' in str(e)
    else:
      raise AssertionError('no error')
