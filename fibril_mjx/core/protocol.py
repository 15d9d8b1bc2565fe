"""The component contract: what a component type is and how the simulator drives it.

A component type is one module that defines, next to each other:

- a pydantic config model (static, from YAML; `fibril_mjx.config.validation.Strict`),
- `Params` — a pytree of arrays (per world, randomizable, differentiable),
- `State` — a pytree (NamedTuple) of the per-world state,
- the built component: a frozen dataclass (static, hashable) whose methods are the pure
  per-tick functions below, and
- `build(cid, raw_config, ctx, catalog) -> component`, registered with
  `fibril_mjx.register(TYPE, build=build, config_model=...)`.

A built component declares its **roles**; the simulator dispatches on them, never on which
methods happen to exist:

| role | called | methods |
| --- | --- | --- |
| `SENSOR` | after the tick's `mjx.forward`, in manifest order | `sense` |
| `ESTIMATOR` | after the tick's `mjx.forward`, in manifest order, with the outputs of the components before it | `sense` |
| `ACTUATOR` | before the tick's `mjx.forward`, in manifest order | `null_command`, `script_command`, `reset_ctrl`, `actuate`, `bindings` |

An actuator with feedback has both `ACTUATOR` and `SENSOR`. Hashing and equality of a built
component come from its dataclass fields (fields that describe the plan only are declared
with `compare=False`), so two equal manifests share compiled code.

Per tick k (SPEC §4, one world): integration of the previous tick's state to `x_k` →
actuators' `actuate` (schedule `application`) → `mjx.forward` of `x_k` with the tick's controls
→ sensors' and estimators' `sense` (every other schedule, also evaluated at tick k), so a
sample stamped k describes `x_k`.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, runtime_checkable

import jax

SENSOR = 'sensor'
ACTUATOR = 'actuator'
ESTIMATOR = 'estimator'
ROLES = (SENSOR, ACTUATOR, ESTIMATOR)

# Schedules evaluated at tick k before the tick's forward (actuator application); every other
# schedule is evaluated at tick k after it (acquisition, feedback).
PRE_PHYSICS = ('application',)


@runtime_checkable
class Component(Protocol):
  """What every built component provides.

  Attributes:
    id: the manifest component id.
    type: the manifest type, e.g. `fibril_sim/imu` (class attribute).
    sample_type: the versioned sample type of its output, e.g. `fibril_sim/imu_sample/v1`.
    roles: frozenset of `SENSOR`, `ACTUATOR`, `ESTIMATOR` (class attribute).
    fields: `((manifest field, FieldValue), ...)` — resolved values with their layer, for the
      plan and run metadata.
    schedules: `{name: fibril_mjx.mechanisms.schedule.Schedule}`; `application` runs before physics,
      any other name after it.
  """
  id: str
  type: ClassVar[str]
  sample_type: ClassVar[str]
  roles: ClassVar[frozenset]
  fields: tuple

  @property
  def schedules(self) -> dict: ...

  def default_params(self) -> Any:
    """Params of one world from the resolved config (float32 arrays)."""

  def param_path(self, field: str) -> tuple[str | int, ...] | None:
    """Where manifest field `field` lives in Params (`('angular_velocity', 'bias')`; an int
    step indexes a tuple, `('faults', 0, 'start_s')`), or None when it is static (not in
    Params)."""

  def init(self, params: Any, world_key: jax.Array) -> Any:
    """Initial state of one world; random draws use named streams of `world_key`."""

  def output(self, state: Any) -> Any:
    """What a consumer sees this tick (a `fibril_mjx.mechanisms.transport.Delivered`; with
    FIFO delivery a `fibril_mjx.mechanisms.fifo.Batch`)."""

  def truth(self, state: Any, data: Any) -> dict:
    """Ideal values of this tick (`truth/<id>/<field>`), never a sample."""

  def status(self, state: Any) -> dict:
    """Counters a user should see (lost, overflow, clip counts, ...)."""

  def describe(self) -> list[str]:
    """Plan lines (schedules, transport, bindings, terms on)."""


@runtime_checkable
class Sensor(Component, Protocol):
  """Role `SENSOR` or `ESTIMATOR`: runs after physics."""

  def sense(self, params: Any, state: Any, data: Any, tick: jax.Array, dues: dict,
            env: dict) -> Any:
    """One tick after physics.

    Args:
      data: `mjx.Data` of `tick`.
      dues: `{schedule name: (due, n)}` of this tick, shared by all worlds.
      env: `{component id: output}` of the components sensed before this one.

    Returns:
      the new state.
    """


@runtime_checkable
class Actuator(Component, Protocol):
  """Role `ACTUATOR`: writes MuJoCo controls before physics.

  Attributes:
    bindings: the bound MuJoCo actuators (`ActuatorBinding`s), one driver per actuator.
    reads_forward: optional class attribute; False where `reset_ctrl` and `actuate` read only
      `qpos` / `qvel` of the state they act on (then the initial state is not forwarded before
      tick 0 for them; absent: True).
  """
  bindings: tuple

  def null_command(self) -> Any:
    """The command meaning "nothing issued this tick"."""

  def script_command(self, kind: str, value, velocity, extra: dict) -> Any:
    """The command of a manifest `command_script` entry."""

  def reset_ctrl(self, params: Any, state: Any, data: Any, ctrl: jax.Array
                 ) -> tuple[Any, jax.Array]:
    """What the actuator holds before its first application: `(state, ctrl)`."""

  def actuate(self, params: Any, state: Any, data: Any, ctrl: jax.Array, command: Any,
              tick: jax.Array, dues: dict) -> tuple[Any, jax.Array]:
    """One tick before physics: transport the command, apply at instants; `(state, ctrl)`."""


def check(component) -> None:
  """Raises `TypeError` naming what a built component lacks for its declared roles."""
  missing = _lacking(component, Component)
  roles = None if 'roles' in missing else component.roles
  if not roles or not set(roles) <= set(ROLES):
    raise TypeError(f'{type(component).__name__}: roles must be a non-empty subset of {ROLES}, '
                    f'got {roles!r}')
  for proto, wanted in ((Sensor, SENSOR in roles or ESTIMATOR in roles),
                        (Actuator, ACTUATOR in roles)):
    if wanted:
      missing += [n for n in _lacking(component, proto) if n not in missing]
  if missing:
    raise TypeError(f'{type(component).__name__} declares roles {sorted(roles)} but lacks '
                    f'{", ".join(missing)} (see fibril_mjx/core/protocol.py)')
  try:
    hash(component)
  except TypeError as e:
    raise TypeError(f'{type(component).__name__} must be hashable (a frozen dataclass whose '
                    f'compared fields are hashable): {e}') from None


def _lacking(component, proto) -> list[str]:
  """The members of `proto` that the simulator reads and `component` lacks: the attributes
  `id`, `fields`, `schedules` (and `roles` of `Component`), then its own methods."""
  names = ('id', 'fields', 'schedules') + (('roles',) if proto is Component else ())
  return [n for n in (*names, *_methods(proto)) if not hasattr(component, n)]


def _methods(proto) -> list[str]:
  return [n for n, v in vars(proto).items() if callable(v) and not n.startswith('_')]
