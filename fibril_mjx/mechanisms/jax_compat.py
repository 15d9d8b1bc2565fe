"""The few JAX names whose home moved between the versions fibril_mjx runs on (the pinned
jax 0.10.x here, jax 0.11.x on the GPU machines' image): one place to look them up."""

from __future__ import annotations

import jax
from jax._src import xla_bridge as _xla_bridge   # private; no public equivalent

try:   # public in both; looked up defensively since `jax.core` has been pruned over releases
  Tracer = jax.core.Tracer
except AttributeError:   # pragma: no cover — a jax without it in jax.core
  from jax._src.core import Tracer   # noqa: F401


def is_tracer(x) -> bool:
  """Whether `x` is a traced value (inside `jit` / `grad` / `vmap`), not a concrete array."""
  return isinstance(x, Tracer)


def backend_started() -> bool:
  """Whether JAX has initialized a backend (it then has read XLA_FLAGS: setting them is too
  late for this process)."""
  return _xla_bridge.backends_are_initialized()
