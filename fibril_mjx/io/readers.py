"""Opening binary data files (`.npz`, `.parquet`) a user hands in or an earlier command wrote:
an empty, truncated or foreign file is one line naming it, what is wrong and what to do
(`fibril_mjx.errors.unreadable`), never a zipfile or pyarrow traceback."""

from __future__ import annotations

import pathlib
import zipfile

import numpy as np

from fibril_mjx.errors import AGAIN, FibrilError, unreadable


def parquet():
  """`(pyarrow, pyarrow.parquet)`, or a one-line error when pyarrow is not installed."""
  try:
    import pyarrow as pa
    import pyarrow.parquet as pq
  except ImportError:
    raise FibrilError('.parquet files need pyarrow (pip install pyarrow); '
                      'use .npz otherwise') from None
  return pa, pq


def read_npz(path, remedy: str = AGAIN) -> dict:
  """`{name: array}` of a `.npz` file (no pickles)."""
  if not zipfile.is_zipfile(path):
    raise unreadable(path, '.npz file', 'not a ZIP archive: truncated, or another format', remedy)
  try:
    with np.load(path, allow_pickle=False) as z:
      return {k: z[k] for k in z.files}
  except (ValueError, OSError, EOFError, KeyError, zipfile.BadZipFile) as e:
    raise unreadable(path, '.npz file', e, remedy) from None


def read_parquet(path, remedy: str = AGAIN):
  """The `pyarrow.Table` of a `.parquet` file."""
  _, pq = parquet()
  path = pathlib.Path(path)
  with open(path, 'rb') as fh:
    head = fh.read(4)
    fh.seek(max(0, path.stat().st_size - 4))
    tail = fh.read(4)
  if head != b'PAR1' or tail != b'PAR1':
    raise unreadable(path, '.parquet file',
                     'no Parquet header or footer: truncated, or another format', remedy)
  try:
    return pq.read_table(path)
  except Exception as e:  # noqa: BLE001 — any pyarrow failure is a bad file
    raise unreadable(path, '.parquet file', e, remedy) from None
