"""Reads and writes of one slot of a small ring buffer, without gathers or scatters.

Under `vmap` a traced index becomes an XLA gather or scatter per leaf — a loop over the
worlds that also splits the step into more kernels. A ring's capacity is static and small, so
one select per slot does the same exactly (a chain of `where`s over static slices) and fuses
with the arithmetic around it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def get(arr: jax.Array, slot) -> jax.Array:
  """`arr[slot]` for a traced `slot` in `[0, len(arr))`.

  Args:
    arr: `(capacity, ...)`.
    slot: int32 scalar.

  Returns:
    `arr[slot]`, shape `arr.shape[1:]`.
  """
  out = arr[0]
  for k in range(1, arr.shape[0]):
    out = jnp.where(slot == k, arr[k], out)
  return out


def put(arr: jax.Array, slot, value, where=True) -> jax.Array:
  """`arr` with `arr[slot] = value` where `where` (bool scalar), else `arr` unchanged.

  Args:
    arr: `(capacity, ...)`.
    slot: int32 scalar in `[0, capacity)`.
    value: shape `arr.shape[1:]` (or broadcastable to it).
  """
  hit = (jnp.arange(arr.shape[0], dtype=jnp.int32) == slot) & where
  hit = hit.reshape((-1,) + (1,) * (arr.ndim - 1))
  return jnp.where(hit, jnp.asarray(value, arr.dtype), arr)
