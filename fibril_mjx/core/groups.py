"""Components of one type step as one group: a robot's twenty motors are traced, compiled and
launched as one motor with a member axis, not twenty.

A built component is static: its trace depends on its config (which terms are on, its
schedules, its transport) and on its bindings (actuator, joint and sensor addresses, gears,
limits). The bindings differ from member to member but do not shape the trace: an address is
an index, a gear a factor. A component type says which of its fields are such bindings
(`per_member`, numbers in them become per-member arrays), which fields only name it
(`labels`: its id, plan metadata) and which config fields name its bindings
(`member_config`). Two components whose **skeleton** — the component with the numbers of its
bindings replaced by slots and its labels blanked — is equal step as one group: the host
stacks the numbers of each member along a leading member axis once, and the traced step of the
group is the component's own step under `jax.vmap` over members, with the member's bindings
read from those arrays. A type that declares no `per_member` field, and every component whose
skeleton no other shares, is a group of one: its step is its own, traced as before.

Inside a binding, a dataclass keeps the fields it names in `shaping` as they are (a probe's
`dim`, an actuator's `kind`): they shape the trace, so members differing in one are different
groups. Every other number is a per-member leaf, every other string a label (names, for
messages and the plan), `None` and booleans stay structure.

Groups are formed on the host (`form`), in manifest order of their first member, and shown by
`fibril-mjx plan`.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fibril_mjx.core import protocol
from fibril_mjx.mechanisms import rng


@dataclasses.dataclass(frozen=True)
class Slot:
  """Where a per-member number sat in a skeleton: `dtype` `'i'` (int32) or `'f'` (float32)."""
  dtype: str


def _number(x) -> bool:
  return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def _walk(x, leaf):
  """A per-member field value with each number (or `Slot`) replaced by `leaf(it)` and each
  string blanked (a name), keeping what a dataclass names in `shaping`, `None` and booleans."""
  if isinstance(x, Slot) or _number(x):
    return leaf(x)
  if isinstance(x, str):
    return ''
  if isinstance(x, tuple):
    return tuple(_walk(e, leaf) for e in x)
  if dataclasses.is_dataclass(x):
    shaping = getattr(type(x), 'shaping', None)
    if shaping is None:
      raise TypeError(f'{type(x).__name__} is in a per_member field of a component but does '
                      "not declare `shaping` (the names of its fields that shape the trace, "
                      '() for none; see fibril_mjx/core/groups.py)')
    return _replaced(x, {f.name: getattr(x, f.name) if f.name in shaping
                         else _walk(getattr(x, f.name), leaf) for f in dataclasses.fields(x)})
  return x


def _slot(leaves: list):
  """`leaf` of `_walk` that appends a number to `leaves` and leaves its `Slot`."""
  def leaf(n):
    leaves.append(n)
    return Slot('f' if isinstance(n, (float, np.floating)) else 'i')
  return leaf


def _replaced(obj, values: dict):
  """A copy of the frozen dataclass `obj` with `values` set, without running its `__init__`
  checks (a skeleton holds slots, a member traced arrays)."""
  new = copy.copy(obj)
  for name, v in values.items():
    object.__setattr__(new, name, v)
  return new


def split(component) -> tuple[Any, list]:
  """`(skeleton, numbers)` of a built component: the skeleton compares equal for components
  that step as one group; the numbers are its per-member bindings, in skeleton order."""
  cls, leaves, values = type(component), [], {}
  for name in cls.per_member:
    values[name] = _walk(getattr(component, name), _slot(leaves))
  for name in cls.labels:
    values[name] = type(getattr(component, name))()
  named = cls.member_config
  if named:
    values['cfg'] = component.cfg.model_copy(update={f: None for f in named})
  return _replaced(component, values), leaves


def member(skeleton, numbers, id_hash=None) -> Any:
  """The component of one member of a group: `skeleton` with its per-member numbers (traced
  scalars under the group's `vmap`); with `id_hash` (`Group.id_hashes`), its `id` is that
  hash as an `rng.MemberId`, which names its random streams (`rng.stream_key`) when it is
  initialized and refuses to be formatted."""
  leaves = iter(numbers)
  values = {name: _walk(getattr(skeleton, name), lambda _: next(leaves))
            for name in type(skeleton).per_member}
  return _replaced(skeleton, values if id_hash is None
                   else {**values, 'id': rng.MemberId(id_hash)})


@dataclasses.dataclass(frozen=True, eq=False)
class Group:
  """Components that step as one (static; made on the host by `form`).

  Attributes:
    ids: the members' component ids, in manifest order (one id: a group of one).
    skeleton: what the members share (`split`); the component itself for a group of one.
    numbers: per-member bindings, one `(members,)` int32 / float32 array per slot.
    writes: `(members, channels)` the `ctrl` indices each member writes (actuators).
  """
  ids: tuple
  skeleton: Any
  numbers: tuple
  writes: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 0), np.int32))

  @property
  def key(self) -> str:
    """The key of the group's stacked state in a packed `components` dict
    (`groups.pack`): its ids joined by '|' (never a component id)."""
    return '|'.join(self.ids)

  @property
  def id_hashes(self) -> np.ndarray:
    """`(members,)` uint32: `rng.name_hash` of each member's id."""
    return np.asarray([rng.name_hash(cid) for cid in self.ids], np.uint32)

  @property
  def stacked(self) -> bool:
    """Stepped under a `vmap` over members (more than one member)."""
    return len(self.ids) > 1

  # ------------------------------------------------------------ traced: one world

  def run(self, params: dict, comps: dict, fn, *per_member):
    """`fn(component, params, state, *per_member) -> (state, *rest)` of every member,
    returned as `({id: state}, *rest)` (`rest` stacked along the member axis when the group
    has several members).

    A group of one calls `fn` on its component; a larger group calls it once, under
    `jax.vmap` over the members, on the skeleton with each member's bindings (`member`), its
    Params, State and `per_member` inputs stacked along the member axis. A member's result is
    the one `fn` gives it alone (the members share everything else `fn` reads). Where `comps`
    (`params`) holds the group's state (Params) `pack`ed it is read from there, and the state
    returned as `{key: stacked state}`."""
    if not self.stacked:
      cid = self.ids[0]
      state, *rest = fn(self.skeleton, params[cid], comps[cid], *(x[cid] for x in per_member))
      return ({cid: state}, *rest)
    state, *rest = jax.vmap(lambda numbers, p, s, *more: fn(
        member(self.skeleton, numbers), p, s, *more))(
            self.numbers, self.entries(params), self.entries(comps),
            *(_stack([x[cid] for cid in self.ids]) for x in per_member))
    return ({self.key: state} if self.key in comps else self.members(state), *rest)

  def entries(self, tree: dict):
    """The members' entries of `tree` stacked along the member axis (as they are where
    `tree` is packed)."""
    return tree[self.key] if self.key in tree else _stack([tree[cid] for cid in self.ids])

  def outputs(self, components: dict, comps: dict, fn) -> dict:
    """`{id: fn(component, state)}` of every member (`components`: the built ones by id):
    where the group's state is packed, `fn` runs once under a `vmap` over the members and
    only its (small) result is sliced per member, not the whole state."""
    if self.key not in comps or not self.stacked:
      return {cid: fn(components[cid], comps[cid]) for cid in self.ids}
    return self.members(jax.vmap(lambda numbers, s: fn(member(self.skeleton, numbers), s))(
        self.numbers, comps[self.key]))

  def members(self, stacked) -> dict:
    """`{id: its slice}` of a tree stacked along the member axis (axis 0)."""
    return {cid: jax.tree.map(lambda x, i=i: x[i], stacked) for i, cid in enumerate(self.ids)}

  def write_ctrl(self, ctrl, written):
    """`ctrl` with the group's controls from `written` (its members' `ctrl` after they wrote:
    one, or stacked along the member axis, each member's own channels taken)."""
    if not self.stacked:
      return written
    return ctrl.at[self.writes].set(written[np.arange(len(self.ids))[:, None], self.writes])

  def describe(self) -> str:
    kind = self.skeleton.type
    if not self.stacked:
      return f'{self.ids[0]} ({kind}): a group of one'
    return (f'{kind} x {len(self.ids)} ({", ".join(self.ids)}): one step with a member axis, '
            f'{len(self.numbers)} per-member binding numbers')


def _writes(component) -> tuple:
  """The `ctrl` indices an actuator component writes (its bindings' `ctrladr`)."""
  if protocol.ACTUATOR not in component.roles:
    return ()
  return tuple(int(b.ctrladr) for b in component.bindings)


def form(components: dict, role_filter) -> tuple[Group, ...]:
  """The groups of the components `role_filter` accepts, in manifest order of their first
  member. Components group when their type declares `per_member` fields and their skeletons
  are equal. Members write disjoint `ctrl` indices (the builder refuses two drivers of one
  actuator), so their controls scatter back in any order."""
  members: dict = {}   # in manifest order of the first member (dicts keep insertion order)
  for cid, c in components.items():
    if not role_filter(c):
      continue
    if not type(c).per_member:
      members[cid] = [(cid, ())]
      continue
    skeleton, numbers = split(c)
    members.setdefault((type(c), skeleton), []).append((cid, numbers))
  out = []
  for ms in members.values():
    ids = tuple(cid for cid, _ in ms)
    if len(ids) == 1:
      out.append(Group(ids, components[ids[0]], ()))
      continue
    numbers = tuple(np.asarray(col, np.int32 if isinstance(col[0], (int, np.integer))
                               else np.float32) for col in zip(*(n for _, n in ms)))
    out.append(Group(ids, split(components[ids[0]])[0], numbers,
                     np.asarray([_writes(components[cid]) for cid in ids], np.int32)))
  return tuple(out)


def _stack(trees, axis: int = 0):
  return jax.tree.map(lambda *x: jnp.stack(x, axis), *trees)


def pack(built, tree: dict, axis: int = 0) -> dict:
  """`{id: state}` (or `{id: Params}`) of a `Built`'s components with the entries of each
  group of several members stacked along a member axis at `axis` (0 for one world, 1 for a
  batch) under its `Group.key` instead. A world's state is kept packed from its `init` on
  (`pipeline.before_tick0`), so that a step reads and writes each group's state in place,
  with no stacking and slicing per tick; `pipeline.step` takes either layout, for its state
  and its params. Entries already packed stay."""
  out = dict(tree)
  for g in built.stacked_groups:
    if g.ids[0] in out:
      out[g.key] = _stack([out.pop(cid) for cid in g.ids], axis)
  return out


def unpack(built, tree: dict, axis: int = 0) -> dict:
  """`pack` reversed: `{id: state}` in manifest order (`Simulation.component_states` for a
  batch)."""
  out = dict(tree)
  for g in built.stacked_groups:
    if g.key in out:
      stacked = out.pop(g.key)
      out.update({cid: jax.tree.map(lambda x, i=i: jax.lax.index_in_dim(x, i, axis, False),
                                    stacked) for i, cid in enumerate(g.ids)})
  return {cid: out[cid] for cid in built.components}
