"""What a sensor with faults shares on the host: named stream keys, timing and site binding,
shared-stream checks."""

from __future__ import annotations

from fibril_mjx.mechanisms import fifo, rng
from fibril_mjx.mechanisms import transport as tp
from fibril_mjx.errors import ConfigError
from fibril_mjx.mechanisms.faults.spec import DeviceConfig
from fibril_mjx.mechanisms.schedule import Schedule
from fibril_mjx.errors import did_you_mean, plain


# ----------------------------------------------------------------------- host helpers

def stream_keys(world_key, cid: str, sources, shared: dict | None = None) -> dict:
  """`{source: key}` for a component's sources; `shared` maps a source to a shared stream name
  (common-mode errors): its key is `stream_key(world_key, 'shared:' + name, source)`, the same
  for every component naming that stream."""
  out = {s: rng.stream_key(world_key, cid, s) for s in sources}
  for source, name in (shared or {}).items():
    out[source] = rng.stream_key(world_key, 'shared:' + name, source)
  return out


def build_timing(cfg: DeviceConfig, ctx, origin):
  """`(Schedule, Transport)` of a `DeviceConfig` (SPEC §4); the transport is a `fifo.Fifo`
  with `delivery: fifo` (a config with `fifo.FifoConfig`)."""
  schedule = Schedule.build(cfg.period_s, cfg.phase_s, ctx.dt, cfg.quantization, origin=origin)
  if isinstance(cfg, fifo.FifoConfig):
    if cfg.delivery == 'fifo':
      return schedule, fifo.Fifo.build(cfg, ctx.dt, origin)
    fifo.unused_fields(cfg, origin)
  transport = tp.Transport.build(cfg.latency_s, cfg.jitter_s, cfg.loss_probability,
                                 cfg.period_s, ctx.dt, cfg.quantization, origin=origin)
  return schedule, transport


def bind_site(ctx, name: str, origin, field: str = 'site') -> int:
  """Id of MuJoCo site `name` in the compiled model (error with a suggestion otherwise)."""
  import mujoco

  m = ctx.model
  sid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, name)
  if sid < 0:
    names = [m.site(i).name for i in range(m.nsite)]
    raise ConfigError(*origin(field), 'no MuJoCo site of that name in the compiled model'
                      + did_you_mean(name, names), name)
  return int(sid)


def check_shared_stream(ctx, cid: str, cfg, stream_field: str, same: tuple[str, ...], origin):
  """Components sharing a common-mode stream must draw it at the same instants with the same
  correlation: every earlier component of the same type naming the stream has equal `same`
  fields (e.g. period, phase, correlation time)."""
  name = getattr(cfg, stream_field)
  if name is None:
    return
  for other_id, other in ctx.built.items():
    ocfg = getattr(other, 'cfg', None)   # a registered component need not have a config model
    if ocfg is None or type(ocfg) is not type(cfg) or getattr(ocfg, stream_field) != name:
      continue
    for f in same:
      if getattr(ocfg, f) != getattr(cfg, f):
        raise ConfigError(*origin(f), f'must equal {plain(getattr(ocfg, f))!r} of component '
                          f'{other_id!r}, which shares {stream_field} {name!r} (a shared '
                          'error process is drawn at the same instants)', getattr(cfg, f))
