"""A campaign directory's files: the Parquet parts of its rows (one per chunk, each written
atomically) and the atomic write of its other files; read by `execute` (resume), `report`
and `replay`."""

from __future__ import annotations

import pathlib

import numpy as np

from fibril_mjx.errors import FibrilError
from fibril_mjx.io import outdir


def write_atomic(path: pathlib.Path, data: bytes) -> None:
  """Writes `data` to `path` atomically (staged, fsynced, renamed)."""
  outdir.write_file(path, data, fsync=True)


def write_part(path: pathlib.Path, cols: dict) -> None:
  """One Parquet part, atomically."""
  import pyarrow as pa
  import pyarrow.parquet as pq
  table = pa.table({k: np.asarray(v) for k, v in cols.items()})
  with outdir.staged_file(path, fsync=True) as tmp:
    pq.write_table(table, tmp)


def read_rows(out) -> dict:
  """All rows of a campaign directory, sorted by world: `{column: array}`."""
  import pyarrow.parquet as pq
  import pyarrow as pa
  parts = sorted((pathlib.Path(out) / 'parts').glob('part-*.parquet'))
  if not parts:
    raise FibrilError(f'{out}: no result parts')
  table = pa.concat_tables([pq.read_table(p) for p in parts])
  cols = {k: table.column(k).to_numpy() for k in table.column_names}
  order = np.argsort(cols['world'], kind='stable')
  return {k: v[order] for k, v in cols.items()}


def part_path(out, i) -> pathlib.Path:
  """The path of part `i` of the campaign directory `out`."""
  return pathlib.Path(out) / 'parts' / f'part-{i:05d}.parquet'
