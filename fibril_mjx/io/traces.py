"""The per-tick traces a run writes (`trace.npz` of `fibril-mjx run`), streamed to disk chunk
by chunk of worlds so that the whole trace is never in memory."""

from __future__ import annotations

import pathlib

import numpy as np


class TraceFile:
  """Per-tick traces of the first K worlds, written chunk by chunk into `.npy` files on disk
  (`numpy.lib.format.open_memmap`), then streamed into `trace.npz`: the whole trace is never
  in memory."""

  def __init__(self, folder: pathlib.Path, n_worlds: int, n_steps: int):
    self.folder, self.n, self.t = folder, n_worlds, n_steps
    self.arrays: dict[str, np.ndarray] = {}
    folder.mkdir(parents=True, exist_ok=True)

  def write(self, flat: dict, lo: int, hi: int, t0: int) -> None:
    """Worlds `lo..hi-1` (global), ticks `t0..` of each `(worlds, ticks, ...)` array."""
    hi = min(hi, self.n)
    if lo >= hi:
      return
    for k, v in flat.items():
      a = self.arrays.get(k)
      if a is None:
        name = self.folder / (k.replace('/', '__') + '.npy')
        a = np.lib.format.open_memmap(name, mode='w+', dtype=v.dtype,
                                      shape=(self.n, self.t) + v.shape[2:])
        self.arrays[k] = a
      a[lo:hi, t0:t0 + v.shape[1]] = v[:hi - lo]

  def save_npz(self, path: pathlib.Path, **extra) -> None:
    """`path` (`.npz`) with the `extra` arrays and every trace written so far."""
    for a in self.arrays.values():
      a.flush()
    np.savez(path, **extra, **self.arrays)   # streams each array in buffered pieces
