"""A user's own sensor type, outside the package: `python my_encoder.py run|plan|... ARGS`."""
import dataclasses
import sys
from typing import NamedTuple

import jax.numpy as jnp
import mujoco
import numpy as np

from fibril_mjx import ConfigError, cli, error_models as em, register
from fibril_mjx.components import base
from fibril_mjx.io import mcap_export
from fibril_mjx.mechanisms import faults, transport

TYPE = 'acme/encoder'
ERRORS = em.chain(em.constant_bias('offset_rad'), em.white_noise('noise_stddev_rad'),
                  em.quantization('resolution_rad'))      # applied in this order


class Config(faults.DeviceConfig):     # + period_s, latency_s, jitter_s, faults, ... (SPEC §4)
  joint: str
  offset_rad: float = 0.0              # the error model's fields: a term left at its default
  noise_stddev_rad: base.NonNeg = 0.0  # is compiled out
  resolution_rad: base.NonNeg = 0.0


class Params(NamedTuple):              # per world: what `vary` draws and `tune` fits
  offset_rad: jnp.ndarray
  noise_stddev_rad: jnp.ndarray
  resolution_rad: jnp.ndarray
  faults: tuple


class Sample(NamedTuple):              # what one acquisition delivers
  position: jnp.ndarray                # rad
  health: jnp.ndarray


class State(NamedTuple):               # per world, carried from tick to tick
  streams: dict                        # RNG keys: noise, delivery jitter and loss
  queue: transport.QueueState          # samples on their way (latency, jitter, loss)
  held: transport.Delivered            # the latest delivered sample
  faults: faults.FaultState


@dataclasses.dataclass(frozen=True)
class Encoder(base.SensorBase):        # + id, cfg, schedule, transport, dt, fault_plan, ...
  probe: object                        # reads the joint's qpos
  type, sample_type, errors = TYPE, 'acme/encoder_sample/v1', ERRORS
  params_type, state_type, reads_sensors_only = Params, State, True

  def init(self, p, world_key):
    return self.init_state(State, p, world_key, Sample(jnp.float32(0), jnp.int32(0)))

  def acquire(self, p, s, data, tick, n):  # sample n, at a tick on the schedule
    _, x, _ = ERRORS.apply(p, {}, self.probe.state(data)[0], self.error_ctx(s.streams, n))
    return s, Sample(jnp.asarray(x, jnp.float32), jnp.int32(faults.HEALTHY))

  def truth(self, s, data):
    return {'position': self.probe.state(data)[0]}


def build(cid, raw, ctx, catalog):     # host side, once: names → indices
  sb = base.SensorBuild(Config, TYPE, cid, raw, ctx, catalog)
  jid = mujoco.mj_name2id(ctx.model, mujoco.mjtObj.mjOBJ_JOINT, sb.cfg.joint)
  if jid < 0:
    raise ConfigError(*sb.origin('joint'), 'no MuJoCo joint of that name', sb.cfg.joint)
  return sb.make(Encoder, Sample(np.float32(0), np.int32(0)), probe=ctx.joint_probe(jid))


def ros(s, header, ctx):               # one delivered sample as ROS 2 messages (export-mcap)
  pos, none = np.array([s['position']], np.float64), np.zeros(0)
  return [('joint_states', mcap_export.TYPES['sensor_msgs/msg/JointState'](
      header=header, name=[ctx.cid], position=pos, velocity=none, effort=none))]


register(TYPE, build=build, config_model=Config, ros=ros)

if __name__ == '__main__':
  sys.exit(cli.main())
