"""`Built`: the static, hashable result of the host build, which the one-world pipeline
(`fibril_mjx.core.pipeline`) runs.

It sits in core/ (below builder/, which constructs it) so that the pipeline can name the type it
takes, and its `Attributes` are the contract the pipeline reads; it depends on MuJoCo, MJX and
the grouping of components (`core/groups.py`) alone.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import mujoco

from fibril_mjx.core import groups, protocol
from fibril_mjx.errors import ConfigError
from fibril_mjx.physics.mjcf import initial_data
from fibril_mjx.physics.mjx import mjx


@dataclasses.dataclass(frozen=True, eq=False)
class Built:
  """Everything the host-side build resolves from a manifest: static and hashable.

  Hash and equality come from what the compiled code depends on — the manifest's sha256, the
  built components (themselves hashable by their static fields), the scripts and the dcmotor
  binding — so equal manifests share compiled code.

  Attributes:
    manifest: the parsed manifest.
    mj_model: the compiled MuJoCo model (assemblies and overlays applied).
    physics_model: the model MJX steps (a twin without `dcmotor` actuators, else `mj_model`).
    mx: its MJX model; `data0`: `mjx.Data` after `mj_forward` of the initial state — both
      made at their first use (MuJoCo C rollouts, `physics='c'`, need neither).
    dt: physics timestep (s).
    components: `{id: component}` in manifest order.
    actuator_script, command_script: the manifest's open-loop drives.
    dcmotor: static dcmotor binding, or None.
    assemblies, overlays: resolved assemblies and applied overlays (for the plan).
    vary: `{component id: frozenset of fields}` compiled in for per-world variation.
    probes: the hidden sensors the components read physics through
      (`fibril_mjx.core.context.ProbeSet`).
    keyframe: the id of the manifest's `keyframe` every world starts from, or -1 (`qpos0`).
  """
  manifest: Any
  mj_model: mujoco.MjModel
  physics_model: mujoco.MjModel
  dt: float
  components: dict
  actuator_script: Any
  command_script: Any
  dcmotor: Any
  assemblies: dict
  overlays: tuple
  vary: dict
  probes: Any = None
  keyframe: int = -1

  # made outside any trace even when first read inside one (a cached tracer would leak)
  @functools.cached_property
  def mx(self):
    try:
      with jax.ensure_compile_time_eval():
        return mjx.put_model(self.physics_model)
    except NotImplementedError as e:
      raise ConfigError(str(self.manifest.model_path), 'model',
                        f'MJX cannot step this model: {e}') from None

  @functools.cached_property
  def data0(self):
    d = initial_data(self.physics_model, self.keyframe)
    with jax.ensure_compile_time_eval():
      return mjx.put_data(self.physics_model, d)

  @functools.cached_property
  def actuator_groups(self) -> tuple:
    """The actuator components as `groups.Group`s (what steps as one before physics)."""
    return groups.form(self.components, lambda c: protocol.ACTUATOR in c.roles)

  @functools.cached_property
  def sensing_groups(self) -> tuple:
    """The sensing components (sensors, estimators, actuators' feedback) as `groups.Group`s,
    in manifest order of their first member."""
    return groups.form(self.components, lambda c: bool(
        {protocol.SENSOR, protocol.ESTIMATOR} & c.roles))

  @functools.cached_property
  def forward_before_tick0(self) -> bool:
    """Whether `pipeline.before_tick0` forwards the initial state: an actuator reads more of
    it than `qpos` / `qvel` before tick 0's forward (its `reads_forward`, True where a type
    does not say), or a dcmotor's initial activation is read beside actuators."""
    acts = [c for c in self.components.values() if protocol.ACTUATOR in c.roles]
    return bool(acts) and (self.dcmotor is not None
                           or any(getattr(c, 'reads_forward', True) for c in acts))

  @functools.cached_property
  def groups(self) -> tuple:
    """Every group, actuators' and sensing components' alike, each once (an actuator with
    feedback is in both lists); every component is in one."""
    return tuple({g.key: g for g in self.actuator_groups + self.sensing_groups}.values())

  @functools.cached_property
  def stacked_groups(self) -> tuple:
    """The groups of several members: what a loop over ticks carries stacked
    (`groups.pack`)."""
    return tuple(g for g in self.groups if g.stacked)

  def _key(self):
    return (self.manifest.sha256, tuple(self.components.items()), self.actuator_script,
            self.command_script, self.dcmotor, tuple(sorted(self.vary.items())), self.keyframe)

  def __hash__(self):
    return hash(self._key())

  def __eq__(self, other):
    return isinstance(other, Built) and self._key() == other._key()
