"""The world axis (SPEC §1.4, §8): how a batch of worlds is laid out on devices, split into
sub-batches inside one program, padded, chunked on the host and watched. `Simulation`'s verbs,
`fibril-mjx run` and the benchmarks all use it, so a world's result is the same whatever path
runs it.

`Layout` of one program over `n` worlds: `D` devices (`jax.shard_map` over the 1-D mesh
`worlds`, one XLA CPU device per core with `cpu_flags`), on each `m` sub-batches of `k` worlds
that `lax.map` runs through the vmapped single-world code, padded to `D·m·k` with copies of
world 0 (dropped from the results). `k ≥ 2`, and small enough that no batched LAPACK call of
the step splits its batch over the intra-op thread pool (`fibril_mjx.batch.lapack`). Host
chunks (`chunks`) only bound memory; `Watchdog` turns a program that stops making progress
into a `WorldsStalled` error. Why each rule (the LAPACK deadlock, a batch of one, bitwise
identity across layouts): docs/internals/performance.md, "The world axis of one program".
"""
from __future__ import annotations

import dataclasses
import math
import os
import platform
import threading
import time
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from fibril_mjx.mechanisms import jax_compat
from fibril_mjx.errors import FibrilError, moved_attribute

AXIS = 'worlds'
DEFAULT_STALL_S = 120.0     # no process CPU progress for this long while waiting = stalled


class WorldsStalled(FibrilError):
  """A program over a batch of worlds stopped making progress (a deadlock, not slowness)."""


# ---------------------------------------------------------------- devices

ISA_KEY = '--xla_cpu_max_isa'
BITWISE_ISA = 'AVX'   # the widest x86 ISA without FMA
EXTRA_KEY = '--xla_backend_extra_options'
LOOP_OPTION = 'xla_cpu_small_while_loop_byte_threshold'
# XLA:CPU's classic loop emitters instead of its MLIR fusion emitters: shorter compiles, the
# same speed at thousands of worlds; results may differ from the MLIR emitters' by float
# rounding, never between layouts (figures: docs/internals/performance.md, "Classic emitters").
EMITTER_FLAG = '--xla_cpu_use_fusion_emitters=false'
# With one device per usable core each device's program already has a core of its own; XLA's
# multi-threaded Eigen calls (dots, convolutions) would only compete with the other devices'.
EIGEN_FLAG = '--xla_cpu_multi_thread_eigen=false'
# XLA:CPU dispatches a `while` loop's body thunks again at every iteration unless the bytes
# the body touches are below this option (1 kB by default), when it compiles the whole loop
# into one kernel. Loops XLA cannot compile as one kernel (MJX's step: scatters, LAPACK calls)
# are not affected (figures: docs/internals/performance.md, "A scan over ticks is one kernel").
SMALL_LOOP_BYTES = 2**40


def loop_flags(environ=os.environ) -> None:
  """Asks XLA:CPU to compile every `while` loop it can as one kernel (`SMALL_LOOP_BYTES`),
  unless XLA_FLAGS already sets `xla_cpu_small_while_loop_byte_threshold`. XLA reads it when
  JAX initializes its backend; `cpu_flags` calls it (the CLI, `fibril_mjx.cpu_flags()`)."""
  flags = environ.get('XLA_FLAGS', '')
  if LOOP_OPTION in flags:
    return
  option = f'{LOOP_OPTION}={SMALL_LOOP_BYTES}'
  parts = flags.split()
  for i, f in enumerate(parts):   # one flag holds every extra option: extend it
    if f.startswith(EXTRA_KEY + '='):
      parts[i] = f'{f},{option}'
      break
  else:
    parts.append(f'{EXTRA_KEY}={option}')
  environ['XLA_FLAGS'] = ' '.join(parts)


def cpu_flags(n: int | None = None, *, bitwise: bool = True, environ=None) -> int:
  """Sets the XLA CPU flags `fibril-mjx` runs with, in `XLA_FLAGS`.

  Call it before JAX computes anything (`import fibril_mjx` sets no flag; XLA reads XLA_FLAGS
  once, when JAX starts its backend): once a backend has started it leaves `os.environ` alone
  and returns the CPU device count in effect. An option already in XLA_FLAGS is kept.

  * **devices**: asks XLA for `n` CPU devices (default: one per usable core) unless XLA_FLAGS
    already sets a count (an explicit `n` replaces it).
  * **bitwise** (x86 only): caps XLA's CPU code generation at AVX (`--xla_cpu_max_isa=AVX`)
    unless XLA_FLAGS already sets an ISA. Without FMA contraction (which LLVM applies
    differently with the batch size, sub-batches and device count) a world's results are
    bitwise identical in any layout (why, and the cost: docs/internals/performance.md,
    "Every core, and the same bits in any layout").
    `bitwise=False` (CLI `--cpu-isa native`) keeps the host's full ISA; results then agree
    only to float rounding across layouts.
  * **loops**: `loop_flags` (every `lax.scan` over ticks XLA can compile as one kernel is).
  * **compile time**: XLA's classic loop emitters (`EMITTER_FLAG`), shorter compiles.
  * **one thread per device**: with at least one device per usable core, single-threaded
    Eigen calls (`EIGEN_FLAG`), so the devices do not compete for the cores.

  `cpu_flags(1, bitwise=False)`: one device, the host's ISA, the loops, the classic emitters.
  `environ`: a mapping to edit instead of `os.environ` (a subprocess's), whatever this
  process's backend.

  Returns the device count in effect.
  """
  if environ is None:
    if jax_compat.backend_started():
      return len(jax.devices('cpu'))
    environ = os.environ
  flags = environ.get('XLA_FLAGS', '')
  key = '--xla_force_host_platform_device_count'
  if key in flags and n is None:
    n = int(flags.split(key + '=')[1].split()[0])
  else:
    flags = ' '.join(f for f in flags.split() if not f.startswith(key))
    if n is None:
      n = usable_cores()
    flags = (flags + f' {key}={int(n)}').strip()
  for flag, wanted in ((EMITTER_FLAG, True), (EIGEN_FLAG, int(n) >= usable_cores())):
    if wanted and flag.split('=')[0] not in flags:
      flags = f'{flags} {flag}'.strip()
  if bitwise and ISA_KEY not in flags and platform.machine().lower() in ('x86_64', 'amd64'):
    flags = f'{flags} {ISA_KEY}={BITWISE_ISA}'.strip()
  environ['XLA_FLAGS'] = flags
  loop_flags(environ)
  return int(n)


def usable_cores() -> int:
  """The cores this process may run on."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:
    return os.cpu_count() or 1


def cpu_isa(environ=os.environ) -> str:
  """The XLA CPU ISA cap in effect (`'AVX'` under `cpu_flags`), or `'native'` without one."""
  for flag in environ.get('XLA_FLAGS', '').split():
    if flag.startswith(ISA_KEY + '='):
      return flag.split('=', 1)[1]
  return 'native'


def resolve_devices(devices=None) -> tuple:
  """`devices`: None (every local device), an int (the first N), or a sequence of devices."""
  local = jax.local_devices()
  if devices is None:
    return tuple(local)
  if isinstance(devices, int):
    if devices < 1 or devices > len(local):
      raise FibrilError(f'devices={devices}: this process has {len(local)} local device(s) '
                        f'({local[0].platform}); on a CPU host set XLA_FLAGS='
                        '--xla_force_host_platform_device_count=N before JAX initializes '
                        '(fibril-mjx --devices N does this)')
    return tuple(local[:devices])
  return tuple(devices)


# ---------------------------------------------------------------- layout

@dataclasses.dataclass(frozen=True)
class Layout:
  """How `n_worlds` worlds run in one program.

  Attributes:
    n_worlds: real worlds.
    n_devices: devices the world axis is sharded over.
    sub_batch: worlds per vmapped call (`k`, ≥ 2).
    n_sub: sub-batches per device (`m`, run one after another by `lax.map`).
  """
  n_worlds: int
  n_devices: int
  sub_batch: int
  n_sub: int

  @property
  def padded(self) -> int:
    return self.n_devices * self.n_sub * self.sub_batch

  def describe(self) -> str:
    pad = self.padded - self.n_worlds
    return (f'{self.n_worlds} worlds on {self.n_devices} device(s) x {self.n_sub} sub-batch(es) '
            f'of {self.sub_batch}' + (f' (+{pad} padding)' if pad else ''))


def layout(n_worlds: int, n_devices: int = 1, sub_batch_cap: int | None = None) -> Layout:
  """The layout of `n_worlds` worlds over `n_devices` with at most `sub_batch_cap` per call."""
  if n_worlds < 1:
    raise FibrilError(f'n_worlds must be >= 1, got {n_worlds}')
  n_devices = max(1, min(n_devices, n_worlds))
  local = -(-n_worlds // n_devices)
  k = local if sub_batch_cap is None else min(local, max(2, sub_batch_cap))
  k = max(2, k)
  m = -(-local // k)
  k = max(2, -(-local // m))      # same number of sub-batches, least padding
  return Layout(n_worlds, n_devices, k, m)


def pad(tree, lay: Layout, axis: int = 0):
  """Pads the world axis of every leaf to `lay.padded` with copies of world 0."""
  extra = lay.padded - lay.n_worlds
  if extra == 0:
    return tree

  def one(x):
    first = jax.lax.slice_in_dim(x, 0, 1, axis=axis)
    reps = [1] * x.ndim
    reps[axis] = extra
    return jnp.concatenate([x, jnp.tile(first, reps)], axis=axis)
  return jax.tree.map(one, tree)


def unpad(tree, n: int, axis: int = 0):
  return jax.tree.map(lambda x: jax.lax.slice_in_dim(x, 0, n, axis=axis), tree)


def _split(tree, m: int, k: int):
  return jax.tree.map(lambda x: x.reshape((m, k) + x.shape[1:]), tree)


def _merge(tree):
  return jax.tree.map(lambda x: x.reshape((x.shape[0] * x.shape[1],) + x.shape[2:]), tree)


def program(block: Callable, lay: Layout, devices: Sequence) -> Callable:
  """`(shared, world) -> (shared_out, world_out)` over `lay.n_worlds` worlds, from `block`, the
  same signature over one sub-batch of `k` worlds (world leaves leading).

  `shared` leaves have no world axis (replicated); `shared_out` is taken from the first
  sub-batch (it must not depend on the worlds). Not jitted: wrap it in `jax.jit`.
  """
  m, k = lay.n_sub, lay.sub_batch

  def local(shared, world):
    if m == 1:
      return block(shared, world)
    sh, wo = jax.lax.map(lambda w: block(shared, w), _split(world, m, k))
    return jax.tree.map(lambda x: x[0], sh), _merge(wo)

  if lay.n_devices > 1:
    mesh = jax.sharding.Mesh(np.asarray(devices[:lay.n_devices]), (AXIS,))
    P = jax.sharding.PartitionSpec
    local = jax.shard_map(local, mesh=mesh, in_specs=(P(), P(AXIS)), out_specs=(P(), P(AXIS)),
                          check_vma=False)

  def run(shared, world):
    sh, wo = local(shared, pad(world, lay))
    return sh, unpad(wo, lay.n_worlds)
  return run


def unpin(tree):
  """Arrays committed to one device (e.g. `Simulation.mx`, made by `mjx.put_model`) as host
  arrays, so a program over several devices can place them; everything else unchanged."""
  def one(x):
    if isinstance(x, jax.Array) and x.committed and len(x.sharding.device_set) == 1:
      return np.asarray(x)
    return x
  return jax.tree.map(one, tree)


def is_traced(tree) -> bool:
  """True inside a user's transformation (jit / vmap / grad): the caller owns the world axis."""
  return any(jax_compat.is_tracer(x) for x in jax.tree.leaves(tree))


def chunks(n_worlds: int, chunk_worlds: int | None) -> list[tuple[int, int]]:
  """`[(lo, hi), ...]` host chunks of at most `chunk_worlds` worlds (None: one chunk)."""
  step = n_worlds if not chunk_worlds else max(1, int(chunk_worlds))
  return [(lo, min(n_worlds, lo + step)) for lo in range(0, n_worlds, step)]


# ---------------------------------------------------------------- per-world model

def split_model(model, fields: tuple[str, ...], n_worlds: int):
  """`(shared model with the per-world fields removed, {field: (nworld, ...)})`."""
  if model is None or not fields:
    return model, {}
  world = {}
  for f in fields:
    v = getattr(model, f)
    if jnp.ndim(v) == 0 or jnp.shape(v)[0] != n_worlds:
      raise FibrilError(f'model field {f!r}: expected a leading world axis of {n_worlds}, got '
                        f'shape {jnp.shape(v)}')
    world[f] = v
  return model.replace(**{f: None for f in fields}), world


def join_model(shared_model, world_fields: dict):
  return shared_model.replace(**world_fields) if world_fields else shared_model


def model_in_axes(model, fields: tuple[str, ...]):
  """A `vmap` in_axes pytree for `model`: 0 on `fields`, None elsewhere."""
  axes = jax.tree.map(lambda _: None, model)
  return axes.replace(**{f: 0 for f in fields}) if fields else None


# ---------------------------------------------------------------- physics implementation

IMPLS = ('jax', 'warp')


def check_impl(impl: str, *, gradients: bool = False) -> None:
  """Refuses a physics implementation that cannot run here (clear message, no traceback).

  MJX-JAX (`'jax'`, default) runs everywhere and is differentiable. MJX-Warp (`'warp'`) needs
  an NVIDIA GPU visible to JAX and `mujoco-mjx[warp]`, and is not differentiable.
  """
  if impl not in IMPLS:
    raise FibrilError(f'physics impl {impl!r}: unknown; choose one of {", ".join(IMPLS)}')
  if impl == 'jax':
    return
  if gradients:
    raise FibrilError("physics impl 'warp' (MJX-Warp) is not differentiable; gradients need "
                      "impl='jax' (MJX-JAX, the default)")
  devs = jax.devices()
  nvidia = [d for d in devs if d.platform == 'gpu' and 'nvidia' in
            (getattr(d, 'device_kind', '') + ' ' + str(getattr(d, 'client', ''))).lower()
            or d.platform == 'cuda']
  if not nvidia and not any(d.platform == 'gpu' for d in devs):
    raise FibrilError(
        "physics impl 'warp' (MJX-Warp) runs on NVIDIA GPUs only; this process sees "
        f"{len(devs)} {devs[0].platform} device(s). Use impl='jax' (MJX-JAX, the default), "
        'or run on a machine with an NVIDIA GPU and jax[cuda]')
  try:
    import warp  # noqa: F401
  except ImportError:
    raise FibrilError("physics impl 'warp' needs MJX-Warp: pip install 'mujoco-mjx[warp]' "
                      '(warp-lang); it is not installed') from None


def describe_impl(impl: str) -> str:
  return ('MJX-JAX (differentiable; CPU/GPU/TPU)' if impl == 'jax'
          else 'MJX-Warp (NVIDIA GPU, not differentiable)')


# ---------------------------------------------------------------- watchdog

class Watchdog:
  """Waits for a program's results; a program whose process uses no CPU for `stall_s` (a
  deadlock: every XLA worker waits) raises `WorldsStalled` naming `what` instead of hanging.

  `stall_s` defaults to $FIBRIL_MJX_STALL_S or 120 s; 0 waits forever. It watches the host
  CPU, so it is armed only on the CPU backend: a GPU program leaves the host idle while it
  runs, which is not a stall.
  """

  def __init__(self, what: str, stall_s: float | None = None):
    self.what = what
    if stall_s is None:
      stall_s = float(os.environ.get('FIBRIL_MJX_STALL_S', DEFAULT_STALL_S))
    self.stall_s = stall_s if jax.default_backend() == 'cpu' else 0.0

  def wait(self, tree):
    if not self.stall_s:
      return jax.block_until_ready(tree)
    done = threading.Event()
    err: list = []

    def target():
      try:
        jax.block_until_ready(tree)
      except BaseException as e:  # noqa: BLE001 — re-raised in the caller
        err.append(e)
      done.set()
    threading.Thread(target=target, daemon=True, name='fibril-watchdog').start()
    poll = min(5.0, self.stall_s / 4)
    last_cpu, last_t = time.process_time(), time.monotonic()
    while not done.wait(poll):
      cpu, now = time.process_time(), time.monotonic()
      if cpu - last_cpu > 0.02 * (now - last_t):
        last_cpu, last_t = cpu, now
      elif now - last_t >= self.stall_s:
        raise WorldsStalled(
            f'{self.what}: no progress for {now - last_t:.0f} s (process CPU idle while '
            'waiting for XLA) — a stalled program, not a slow one; this is the jaxlib CPU '
            'LAPACK thread-pool deadlock if the sub-batch was forced above the safe size. '
            'Run with fewer worlds per sub-batch (sub_batch=) or report it with '
            'bench/lapack_hang_repro.py')
    if err:
      raise err[0]
    return tree


def describe_memory() -> dict:
  """`{'peak_rss_bytes': ...}` of this process (Linux ru_maxrss is in KiB)."""
  try:
    import resource
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
  except (ImportError, OSError):
    peak = float('nan')
  return {'peak_rss_bytes': peak}


def tree_nbytes(tree) -> int:
  return int(sum(int(np.prod(x.shape, dtype=np.int64)) * np.dtype(x.dtype).itemsize
                 for x in jax.tree.leaves(tree)))


def fmt_bytes(n: float) -> str:
  if not math.isfinite(n):
    return '?'
  for unit in ('B', 'KiB', 'MiB', 'GiB', 'TiB'):
    if abs(n) < 1024 or unit == 'TiB':
      return f'{n:,.0f} {unit}' if unit == 'B' else f'{n:,.1f} {unit}'
    n /= 1024
  return str(n)


def __getattr__(name):   # PEP 562: names moved away, with a warning (fibril_mjx.errors.MOVED)
  return moved_attribute(__name__, name)
