"""`ELEMENT:NAME.ATTRIBUTE` on the compiled model: which named element, and where its attribute
lives in `mjx.Model` — the one resolver behind campaigns (which vary such fields per world)
and tune (which fits them).

Names are resolved to ids and indices here, once, on the host; traced code only sees the
`(mjx.Model field, index)` pair. Overlays and `--set` write attributes on the MjSpec before
compile (any numeric attribute, `physics.assemblies`); the attributes here are those that also
have a compiled array that can change without a recompile.
"""

from __future__ import annotations

import dataclasses
import re

import mujoco

# element -> MuJoCo object type, and the MjModel count of that type
OBJECTS = {'body': mujoco.mjtObj.mjOBJ_BODY, 'joint': mujoco.mjtObj.mjOBJ_JOINT,
           'geom': mujoco.mjtObj.mjOBJ_GEOM, 'site': mujoco.mjtObj.mjOBJ_SITE,
           'actuator': mujoco.mjtObj.mjOBJ_ACTUATOR, 'sensor': mujoco.mjtObj.mjOBJ_SENSOR,
           'tendon': mujoco.mjtObj.mjOBJ_TENDON}
COUNTS = {'body': 'nbody', 'joint': 'njnt', 'geom': 'ngeom', 'site': 'nsite',
          'actuator': 'nu', 'sensor': 'nsensor', 'tendon': 'ntendon'}

# (element, attribute) -> (mjx.Model field, how the element's entries are indexed):
#   `id` the element's row, `dof` the joint's degrees of freedom, `prefix` the leading entries
#   of the actuator's parameter row
MODEL_FIELDS = {
    ('body', 'mass'): ('body_mass', 'id'),
    ('body', 'inertia'): ('body_inertia', 'id'),
    ('geom', 'friction'): ('geom_friction', 'id'),
    ('joint', 'damping'): ('dof_damping', 'dof'),
    ('joint', 'armature'): ('dof_armature', 'dof'),
    ('joint', 'frictionloss'): ('dof_frictionloss', 'dof'),
    ('joint', 'stiffness'): ('jnt_stiffness', 'id'),
    ('actuator', 'gainprm'): ('actuator_gainprm', 'prefix'),
    ('actuator', 'biasprm'): ('actuator_biasprm', 'prefix'),
    ('actuator', 'gear'): ('actuator_gear', 'prefix'),
}

# A dcmotor actuator's physical parameters by their short name: the DcMotorParams field and
# the entry of the actuator's gainprm that holds it in the MJCF.
DCMOTOR_ATTRIBUTES = {'resistance': ('resistance_ohm', 0), 'motorconst': ('motorconst', 1)}

_KEY = re.compile(r'(\w+):([^.]+)\.(\w+)(?:\[(\d+)\])?')


@dataclasses.dataclass(frozen=True)
class Key:
  """A parsed `ELEMENT:NAME.ATTRIBUTE` or `ELEMENT:NAME.ATTRIBUTE[k]` (k: one entry)."""
  element: str
  name: str
  attribute: str
  entry: int | None = None


def parse_key(text: str) -> Key | None:
  """`'actuator:motor.gainprm[0]'` → `Key('actuator', 'motor', 'gainprm', 0)`; None when the
  text has not that form."""
  m = _KEY.fullmatch(str(text))
  if not m:
    return None
  return Key(m.group(1), m.group(2), m.group(3), None if m.group(4) is None else int(m.group(4)))


def object_id(m: mujoco.MjModel, element: str, name: str) -> int:
  """The id of the element of that name, -1 when there is none."""
  return mujoco.mj_name2id(m, OBJECTS[element], name)


def object_names(m: mujoco.MjModel, element: str) -> list[str]:
  """Names of every element of that kind (unnamed ones as '')."""
  return [mujoco.mj_id2name(m, OBJECTS[element], i) or ''
          for i in range(getattr(m, COUNTS[element]))]


def joint_dofs(m: mujoco.MjModel, jid: int) -> int:
  """Degrees of freedom of joint `jid` (free 6, ball 3, hinge and slide 1)."""
  return {int(mujoco.mjtJoint.mjJNT_FREE): 6, int(mujoco.mjtJoint.mjJNT_BALL): 3}.get(
      int(m.jnt_type[jid]), 1)


def model_index(m: mujoco.MjModel, element: str, oid: int, attribute: str, *,
                entry: int | None = None, count: int = 1) -> tuple[str, tuple] | None:
  """Where the attribute of element `oid` lives in `mjx.Model`.

  Args:
    m: the compiled model; element, oid, attribute: the element kind, its id, the attribute.
    entry: one entry of a vector attribute (a geom's `friction[0]`, `gainprm[k]`); None: all
      of an `id` row, the first `count` of a `prefix` row.
    count: leading entries of a `prefix` row (an actuator's gainprm, biasprm, gear).

  Returns:
    `(mjx.Model field, index tuple into it)`, or None when the attribute has no compiled array
    (static: set it on the MjSpec before compile). A joint's dof attribute indexes every dof
    of the joint (a slice for more than one).
  """
  if (element, attribute) not in MODEL_FIELDS:
    return None
  field, how = MODEL_FIELDS[(element, attribute)]
  if how == 'id':
    return field, (oid,) if entry is None else (oid, entry)
  if how == 'dof':
    a, n = int(m.jnt_dofadr[oid]), joint_dofs(m, oid)
    return field, (slice(a, a + n),) if n > 1 else (a,)
  if entry is not None:
    return field, (oid, entry)
  return field, (oid, slice(0, count)) if count > 1 else (oid, 0)
