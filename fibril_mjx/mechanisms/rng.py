"""Named random streams (SPEC §4).

`key = fold_in(fold_in(fold_in(world_key, h(component_id)), h(source)), index)` with `h` the
CRC32 of the UTF-8 name, so a stream depends only on the seed, the world's global index, the
component id, the error source and the index — never on batch layout or other components.
"""

from __future__ import annotations

import zlib

import jax
import jax.numpy as jnp
import numpy as np


def name_hash(name: str) -> np.uint32:
  """Stable 32-bit hash of a name (CRC32 of its UTF-8 bytes)."""
  return np.uint32(zlib.crc32(name.encode('utf-8')))


def world_keys(seed: int, n_worlds: int, first_world: int = 0) -> jax.Array:
  """Keys of worlds `first_world .. first_world + n_worlds - 1` of run `seed`.

  Returns:
    `(n_worlds, 2)` uint32 raw keys.
  """
  root = jax.random.PRNGKey(seed)
  idx = jnp.arange(first_world, first_world + n_worlds, dtype=jnp.uint32)
  return jax.vmap(lambda i: jax.random.fold_in(root, i))(idx)


class MemberId:
  """A group member's `id` while it is initialized under its group's `vmap`
  (`fibril_mjx/core/groups.py`): the member id's `name_hash`, traced. `stream_key` reads it;
  formatting it is refused, since the text of a traced hash would be alike for every member
  (their streams would then coincide)."""

  def __init__(self, hash_: jax.Array):
    self.hash = hash_

  def __format__(self, spec: str) -> str:
    raise TypeError('a grouped component\'s init reads its id only through '
                    'rng.stream_key(world_key, self.id, source) (fibril_mjx/core/groups.py)')

  def __str__(self) -> str:
    return self.__format__('')

  def __repr__(self) -> str:
    return 'MemberId(<the hash of a group member\'s id>)'


def stream_key(world_key: jax.Array, component_id, source: str) -> jax.Array:
  """Base key of one error source of one component in one world. `component_id` is the id,
  or a group member's `MemberId` (its id's hash, traced under the group's `vmap`)."""
  cid = (component_id.hash if isinstance(component_id, MemberId)
         else name_hash(component_id))
  k = jax.random.fold_in(world_key, cid)
  return jax.random.fold_in(k, name_hash(source))


def draw_key(stream: jax.Array, index) -> jax.Array:
  """Key of draw `index` (acquisition index, or 0 for per-episode draws) of a stream."""
  return jax.random.fold_in(stream, jnp.asarray(index, jnp.uint32))


def normal(stream: jax.Array, index, shape=(), dtype=jnp.float32) -> jax.Array:
  """Standard normal draw number `index` of a stream."""
  return jax.random.normal(draw_key(stream, index), shape, dtype)


def uniform(stream: jax.Array, index, shape=(), dtype=jnp.float32) -> jax.Array:
  """Uniform [0, 1) draw number `index` of a stream."""
  return jax.random.uniform(draw_key(stream, index), shape, dtype)
