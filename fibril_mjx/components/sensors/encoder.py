"""`fibril_sim/encoder` — a joint-angle sensor (a servo's or motor's position encoder, an
absolute magnetic encoder on a joint) on its own schedule and transport, so that a measured
angle is a recording field of its own (`sensor/<id>/position`) that `tune` can fit against.

Per acquisition `k` of the hinge or slide joint `joint` (MuJoCo's `jointpos`: the joint's
`qpos`, in the frame whose zero is the MJCF joint `ref`):

    position = Q(q + offset_rad + noise_stddev_rad·w[k])        resolution_rad (Q), stream noise

then the common delivery of SPEC §4 (`period_s`, `phase_s`, `latency_s`, `jitter_s`,
`loss_probability`). The counts of a digital encoder are its `resolution_rad`
(2π / counts per revolution); `offset_rad` is a constant error of its zero.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from fibril_mjx import error_models as em
from fibril_mjx.error_models.terms import NonNeg
from fibril_mjx.mechanisms import faults
from fibril_mjx.mechanisms import host
from fibril_mjx.core.context import BuildContext, JointProbe
from fibril_mjx.components import base
from fibril_mjx.errors import ConfigError, did_you_mean

TYPE = 'fibril_sim/encoder'
SAMPLE_TYPE = 'fibril_sim/encoder_sample/v1'

ERRORS = em.chain(em.constant_bias('offset_rad'), em.white_noise('noise_stddev_rad'),
                  em.quantization('resolution_rad'))


class EncoderConfigModel(faults.DeviceConfig):
  """Validated manifest config of `fibril_sim/encoder` (rad, s): its own fields and its error
  model's."""
  joint: str
  offset_rad: float = 0.0
  noise_stddev_rad: NonNeg = 0.0
  resolution_rad: NonNeg = 0.0


class Params(NamedTuple):
  """Per-world parameters (config names), faults."""
  offset_rad: jax.Array
  noise_stddev_rad: jax.Array
  resolution_rad: jax.Array
  faults: tuple


class Sample(NamedTuple):
  """`fibril_sim/encoder_sample/v1`.

  Attributes:
    position: measured joint angle (rad; m for a slide joint).
    health: int32 (`fibril_mjx.mechanisms.faults`).
  """
  position: jax.Array
  health: jax.Array


State = base.SensorState   # no error-model state: streams, queue, held, faults


@dataclasses.dataclass(frozen=True)
class Encoder(base.SensorBase):
  """A built `fibril_sim/encoder` (static, hashable; `cfg` an `EncoderConfigModel`, the common
  fields of `base.SensorBase`)."""
  probe: JointProbe

  type = TYPE
  sample_type = SAMPLE_TYPE
  params_type, state_type = Params, State
  errors = ERRORS
  reads_sensors_only = True
  # in a group (`core/groups.py`): the joint's probe addresses per member
  per_member = ('probe',)
  member_config = ('joint',)

  def init(self, p: Params, world_key) -> State:
    return self.init_state(State, p, world_key, Sample(jnp.float32(0.0),
                                                       jnp.int32(faults.HEALTHY)))

  def acquire(self, p: Params, s: State, data, tick, n):
    del tick
    q, _ = self.probe.state(data)
    _, x, _ = ERRORS.apply(p, {}, q, self.error_ctx(s.streams, n))
    return s, Sample(jnp.asarray(x, jnp.float32), jnp.int32(faults.HEALTHY))

  def truth(self, s: State, data) -> dict:
    """The joint position and velocity (MuJoCo `jointpos`, `jointvel`)."""
    q, qd = self.probe.state(data)
    return {'position': q, 'velocity': qd}

  def describe(self) -> list[str]:
    return self.describe_errors([f'joint {self.cfg.joint!r} (jointpos)'])


def build(cid: str, raw, ctx: BuildContext, catalog) -> Encoder:
  sb = base.SensorBuild(EncoderConfigModel, TYPE, cid, raw, ctx, catalog)
  cfg, m = sb.cfg, ctx.model
  jid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, cfg.joint)
  if jid < 0:
    names = [m.joint(j).name for j in range(m.njnt)]
    raise ConfigError(*sb.origin('joint'), 'no MuJoCo joint of that name in the compiled model'
                      + did_you_mean(cfg.joint, names), cfg.joint)
  if int(m.jnt_type[jid]) not in (mujoco.mjtJoint.mjJNT_HINGE, mujoco.mjtJoint.mjJNT_SLIDE):
    raise ConfigError(*sb.origin('joint'), 'must be a 1-DoF hinge or slide joint', cfg.joint)
  return sb.make(Encoder, Sample(host.zeros(), host.zeros((), np.int32)),
                 probe=ctx.joint_probe(jid))


CONFIG_MODEL = EncoderConfigModel

# The registration: this module is the type (found by the builder walking components/).
from fibril_mjx.core import registry  # noqa: E402
registry.register(TYPE, build=build, config_model=CONFIG_MODEL)
