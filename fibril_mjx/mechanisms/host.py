"""Arrays made on the host: a component's default params, its neutral sample, a build's
constants, the world axis of default params.

Outside a trace, `jnp.asarray(v, jnp.float32)`, `jnp.zeros(3)`, `jnp.float32(v)` or
`jnp.broadcast_to` each run one XLA operation, which a new process compiles (or reads from JAX's
compilation cache) at its first use of each shape and dtype (its cost:
docs/internals/tuning.md). `jax.device_put` of a NumPy array is a copy. Inside a trace these
return the same values (a traced value passes through `jnp`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from fibril_mjx.mechanisms.jax_compat import is_tracer


def array(value, dtype=np.float32) -> jax.Array:
  """`jnp.asarray(value, dtype)`, copied from the host where `value` is concrete."""
  if any(is_tracer(x) for x in jax.tree.leaves(value)):
    return jnp.asarray(value, dtype)
  return jax.device_put(np.asarray(value, dtype))


def zeros(shape=(), dtype=np.float32) -> jax.Array:
  """`jnp.zeros(shape, dtype)`, copied from the host."""
  return jax.device_put(np.zeros(shape, dtype))


def broadcast(x, shape) -> jax.Array:
  """`jnp.broadcast_to(x, shape)`, copied from the host where `x` is concrete (and not weakly
  typed: a weak type is kept by `jnp`)."""
  if not _concrete(x):
    return jnp.broadcast_to(x, shape)
  return jax.device_put(np.broadcast_to(np.asarray(x), shape))


def _concrete(x) -> bool:
  """Copied from the host: neither traced nor weakly typed (`jnp` keeps a weak type)."""
  return not (is_tracer(x) or (isinstance(x, jax.Array) and x.weak_type))


def broadcast_leaves(tree, n: int):
  """`broadcast(x, (n,) + x.shape)` of every leaf of `tree`, the concrete ones copied to the
  device in one transfer, not one `device_put` per leaf."""
  leaves, treedef = jax.tree.flatten(tree)
  host = [_concrete(x) for x in leaves]
  moved = iter(jax.device_put([np.broadcast_to(np.asarray(x), (n,) + np.shape(x))
                               for x, h in zip(leaves, host) if h]))
  return jax.tree.unflatten(treedef, [next(moved) if h else broadcast(x, (n,) + np.shape(x))
                                      for x, h in zip(leaves, host)])
