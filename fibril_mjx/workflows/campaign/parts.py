"""A campaign directory's files: the Parquet parts of its rows (one per chunk, each written
atomically, its row count and SHA-256 recorded in `campaign.json`) and the atomic write of its
other files; read and verified by `execute` (resume), `report` and `replay`."""

from __future__ import annotations

import hashlib
import json
import pathlib

import numpy as np

from fibril_mjx.errors import FibrilError, unreadable
from fibril_mjx.io import outdir
from fibril_mjx.io.readers import read_parquet

RESUME = 'run the campaign again with --resume to redo it'


def write_atomic(path: pathlib.Path, data: bytes) -> None:
  """Writes `data` to `path` atomically (staged, fsynced, renamed)."""
  outdir.write_file(path, data, fsync=True)


def write_part(path: pathlib.Path, cols: dict) -> dict:
  """One Parquet part, atomically; returns its record for `campaign.json`:
  `{'rows': n, 'sha256': hex digest of the file}`."""
  import pyarrow as pa
  import pyarrow.parquet as pq
  table = pa.table({k: np.asarray(v) for k, v in cols.items()})
  with outdir.staged_file(path, fsync=True) as tmp:
    pq.write_table(table, tmp)
    digest = sha256(tmp)
  return {'rows': table.num_rows, 'sha256': digest}


def sha256(path) -> str:
  """The SHA-256 hex digest of a file's bytes."""
  with open(path, 'rb') as f:
    return hashlib.file_digest(f, 'sha256').hexdigest()


def check_part(out, i: int, meta: dict) -> str | None:
  """Why part `i` of the campaign directory `out` is not the part its `campaign.json` (`meta`)
  recorded, or None when it is: missing, or its SHA-256 differs (a campaign.json without the
  record, written before it existed: unreadable, or a row count that is not its chunk's)."""
  p = part_path(out, i)
  if not p.is_file():
    return 'missing'
  record = meta.get('parts', {}).get(str(i))
  if record is not None:
    return None if sha256(p) == record['sha256'] else (
        'damaged or replaced: its SHA-256 is not the one campaign.json recorded')
  lo, hi = meta['chunks'][i]
  try:
    n = read_parquet(p).num_rows
  except FibrilError:
    return 'not a readable Parquet file'
  return None if n == hi - lo else f'has {n} rows, its chunk {hi - lo}'


def read_rows(out) -> dict:
  """All rows of a campaign directory, sorted by world: `{column: array}`.

  Every completed part is checked against `campaign.json` first (`check_part`): a missing or
  damaged one is a one-line `FibrilError` naming it and `--resume` (which redoes it).
  """
  import pyarrow as pa
  out = pathlib.Path(out)
  meta_path = out / 'campaign.json'
  if meta_path.is_file():
    meta = read_meta(meta_path)
    for i in meta['completed']:
      why = check_part(out, i, meta)
      if why is not None:
        raise FibrilError(f'{part_path(out, i)}: campaign part {why}; run the campaign again '
                          f'with --resume --out {out} to redo it')
    parts = [part_path(out, i) for i in meta['completed']]
  else:   # a directory of parts alone
    parts = sorted((out / 'parts').glob('part-*.parquet'))
  if not parts:
    raise FibrilError(f'{out}: no result parts')
  table = pa.concat_tables([read_parquet(p, RESUME) for p in parts])
  cols = {k: table.column(k).to_numpy() for k in table.column_names}
  order = np.argsort(cols['world'], kind='stable')
  return {k: v[order] for k, v in cols.items()}


def read_meta(path: pathlib.Path) -> dict:
  """A campaign's `campaign.json`; a damaged one is a one-line error."""
  try:
    meta = json.loads(path.read_text(encoding='utf-8'))
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    raise unreadable(path, 'campaign.json', e, 'run the campaign again into another --out'
                     ) from None
  if not isinstance(meta, dict) or not isinstance(meta.get('completed'), list):
    raise unreadable(path, 'campaign.json', 'no list of completed chunks',
                     'run the campaign again into another --out')
  return meta


def part_path(out, i) -> pathlib.Path:
  """The path of part `i` of the campaign directory `out`."""
  return pathlib.Path(out) / 'parts' / f'part-{i:05d}.parquet'
