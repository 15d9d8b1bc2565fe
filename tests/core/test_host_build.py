"""A build runs nothing in XLA: every shipped manifest builds, gives its default params (with
and without a world axis), its neutral samples and its MuJoCo C simulation without one eager
JAX operation (`fibril_mjx/mechanisms/host.py`). Each eager operation is one XLA program
that a new process compiles or reads from JAX's cache at its first use (a warm tune of the
bench's problem (c) in a new process spent ~0.2 s of its 0.6 s on them), and the MJX model is
made at first use only (`Built.mx`), never for MuJoCo C rollouts.

The reference is JAX's own eager path: `EvalTrace.process_primitive` (jax 0.10, the pinned
version) is where a primitive applied outside any trace runs, counted here."""

from __future__ import annotations

import collections
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import core as jax_core

from fibril_mjx.batch import physics_c
from fibril_mjx.batch.simulation import Simulation
from fibril_mjx.builder.build import build
from fibril_mjx.config.manifest import read_manifest
from fibril_mjx.core import pipeline
from fibril_mjx.mechanisms import host

REPO = pathlib.Path(__file__).resolve().parents[2]
MANIFESTS = sorted((REPO / 'manifests').glob('*.yaml')) + [REPO / 'manifests/rl/leg_hold.yaml']


@pytest.fixture
def eager(monkeypatch):
  """The primitives applied outside any trace while the test runs, by name."""
  seen = collections.Counter()
  run = jax_core.EvalTrace.process_primitive

  def counted(self, prim, tracers, params):
    seen[prim.name] += 1
    return run(self, prim, tracers, params)
  monkeypatch.setattr(jax_core.EvalTrace, 'process_primitive', counted)
  return seen


def test_the_counter_sees_an_eager_operation(eager):
  jnp.zeros(3, jnp.float32)
  assert eager['broadcast_in_dim'] == 1


@pytest.mark.parametrize('path', MANIFESTS, ids=lambda p: p.stem)
def test_a_build_and_its_default_params_run_no_xla_operation(path, eager):
  built = build(read_manifest(path))
  one, four = pipeline.default_params(built), pipeline.default_params(built, 4)
  if not physics_c.open_loop_problems(built):
    Simulation(built, physics='c')
  assert not eager, dict(eager)
  assert 'mx' not in vars(built) and 'data0' not in vars(built)
  for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(four)):
    assert isinstance(b, jax.Array) and b.shape == (4,) + np.shape(a)
    np.testing.assert_array_equal(np.asarray(b[3]), np.asarray(a))


def test_host_arrays_equal_jnp_in_value_dtype_and_weak_type():
  for got, want in [(host.array(0.25), jnp.asarray(0.25, jnp.float32)),
                    (host.array([1, 2], np.int32), jnp.asarray([1, 2], jnp.int32)),
                    (host.zeros(3, bool), jnp.zeros(3, bool)),
                    (host.broadcast(jnp.float32(2.0), (2, 1)),
                     jnp.broadcast_to(jnp.float32(2.0), (2, 1))),
                    (host.broadcast(jnp.asarray(2.0), (2,)),   # weakly typed: kept so
                     jnp.broadcast_to(jnp.asarray(2.0), (2,)))]:
    assert isinstance(got, jax.Array)
    assert (got.dtype, got.shape, got.weak_type) == (want.dtype, want.shape, want.weak_type)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
  # a tree's concrete leaves in one transfer, a weak one through jnp: as leaf by leaf
  tree = {'a': host.array([1.0, 2.0]), 'w': jnp.asarray(2.0), 'i': host.array(3, np.int32)}
  for got, want in zip(jax.tree.leaves(host.broadcast_leaves(tree, 4)),
                       jax.tree.leaves(jax.tree.map(lambda x: jnp.broadcast_to(
                           x, (4,) + np.shape(x)), tree))):
    assert (got.dtype, got.shape, got.weak_type) == (want.dtype, want.shape, want.weak_type)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
  # inside a trace a traced value passes through jnp
  f = jax.jit(lambda x: host.array(x * 2) + host.broadcast(x, (2,)))
  np.testing.assert_array_equal(np.asarray(f(jnp.float32(1.5))), [4.5, 4.5])
