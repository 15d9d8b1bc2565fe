"""A recording in memory (`Recording`) and its checks (`validate`): what every reader of
`fibril_mjx.io.recording` and `fibril_mjx.io.bags` returns. The layout of the arrays:
docs/guides/validate-fit.md, "Recording format"."""

from __future__ import annotations

import dataclasses

import numpy as np

from fibril_mjx.errors import ConfigError

PREFIXES = ('sensor', 'command', 'truth', 'initial')
SAMPLE_TIME = 'sample_time_s'
ARRIVAL_TIME = 'arrival_time_s'
COMMAND_TIME = 'time_s'


@dataclasses.dataclass
class Recording:
  """A recording in memory.

  Attributes:
    sensors: `{component id: {field: (S, ...) array}}`, each with `sample_time_s` and
      `arrival_time_s`.
    commands: `{component id: {field: (C, ...) array}}`, each with `time_s`.
    truth: `{component id: {field: array}}` (never used for fitting).
    initial: `{'qpos': (nq,), 'qvel': (nv,)}` or empty.
    meta: JSON-serializable dict (manifest, source, units, ...).
    path: the file it was read from, if any.
  """
  sensors: dict
  commands: dict = dataclasses.field(default_factory=dict)
  truth: dict = dataclasses.field(default_factory=dict)
  initial: dict = dataclasses.field(default_factory=dict)
  meta: dict = dataclasses.field(default_factory=dict)
  path: str | None = None

  def sensor(self, cid: str) -> dict:
    """Fields of one sensing component; one-line error if absent."""
    if cid not in self.sensors:
      raise ConfigError(self.path or '<recording>', f'sensor/{cid}',
                        f'no such component in the recording (has: '
                        f'{", ".join(sorted(self.sensors)) or "none"})')
    return self.sensors[cid]

  def arrays(self) -> dict:
    """Flat `{key: array}` as stored (without `meta`)."""
    out = {}
    for prefix, group in (('sensor', self.sensors), ('command', self.commands),
                          ('truth', self.truth)):
      for cid, fields in group.items():
        for f, a in fields.items():
          out[f'{prefix}/{cid}/{f}'] = np.asarray(a)
    for f, a in self.initial.items():
      out[f'initial/{f}'] = np.asarray(a)
    return out


# ------------------------------------------------------------------------ validation


def recording_error(file, key, rule, value=ConfigError._MISSING):
  """The `ConfigError` of a recording file: `file`, the key (field or column), the rule broken
  and, when given, the value found."""
  return ConfigError(str(file), key, rule, value)


# Sample fields whose type defines ±inf (fibril_sim/range_sample/v1: +inf no return / beyond
# range, −inf below the minimum range, as REP 117 has it); NaN is still rejected.
INFINITY_ALLOWED = ('distance_m',)


def _check_finite(file, key, a):
  if a.dtype.kind in 'fc':
    bad = ~np.isfinite(a)
    if key.startswith('sensor/') and key.rsplit('/', 1)[-1] in INFINITY_ALLOWED:
      bad = np.isnan(a)
    if np.any(bad):
      idx = np.argwhere(bad)[0]
      raise recording_error(file, key,
                            f'must be finite (NaN/inf at index {tuple(int(i) for i in idx)})',
                            a[tuple(idx)].item())


def _check_time(file, key, t, strict):
  if t.ndim != 1:
    raise recording_error(file, key, f'must be 1-D (S,), got shape {t.shape}')
  d = np.diff(t)
  bad = d <= 0 if strict else d < 0
  if np.any(bad):
    i = int(np.argmax(bad)) + 1
    word = 'strictly increasing' if strict else 'non-decreasing'
    raise recording_error(file, f'{key}[{i}]', f'must be {word} (previous value {float(t[i - 1])!r})',
                          float(t[i]))


def _check_leading(file, prefix, fields, count, what):
  """Every array of `fields` (under key `prefix/<field>`) has `count` rows."""
  for f, a in fields.items():
    a = np.asarray(a)
    if a.ndim == 0 or a.shape[0] != count:
      raise recording_error(file, f'{prefix}/{f}',
                            f'leading dimension must be the {what} count {count}, got shape '
                            f'{a.shape}')


def validate(rec: Recording) -> Recording:
  """Checks a recording; raises a one-line `ConfigError` naming the file and key."""
  file = rec.path or '<recording>'
  if not isinstance(rec.meta, dict):
    raise recording_error(file, 'meta', 'must be a JSON object', rec.meta)
  for key, a in rec.arrays().items():
    _check_finite(file, key, a)
  if not rec.sensors and not rec.commands:
    raise recording_error(file, 'sensor', 'a recording needs at least one sensor/<id>/... or '
                          'command/<id>/... key')
  for cid, fields in rec.sensors.items():
    for t in (SAMPLE_TIME, ARRIVAL_TIME):
      if t not in fields:
        raise recording_error(file, f'sensor/{cid}/{t}',
                              'missing (required for every sensor component)')
    ts = np.asarray(fields[SAMPLE_TIME], np.float64)
    ta = np.asarray(fields[ARRIVAL_TIME], np.float64)
    _check_time(file, f'sensor/{cid}/{SAMPLE_TIME}', ts, strict=True)
    _check_time(file, f'sensor/{cid}/{ARRIVAL_TIME}', ta, strict=False)
    if ta.shape != ts.shape:
      raise recording_error(file, f'sensor/{cid}/{ARRIVAL_TIME}',
                            f'must have the shape of {SAMPLE_TIME} {ts.shape}, got {ta.shape}')
    early = ta < ts
    if np.any(early):
      i = int(np.argmax(early))
      raise recording_error(file, f'sensor/{cid}/{ARRIVAL_TIME}[{i}]',
                            f'must be >= {SAMPLE_TIME}[{i}] = {float(ts[i])!r}', float(ta[i]))
    _check_leading(file, f'sensor/{cid}', fields, ts.shape[0], 'sample')
    if len(fields) < 3:
      raise recording_error(file, f'sensor/{cid}',
                            'has only times; at least one sample field needed')
  for cid, fields in rec.commands.items():
    if COMMAND_TIME not in fields:
      raise recording_error(file, f'command/{cid}/{COMMAND_TIME}',
                            'missing (required for every command component)')
    t = np.asarray(fields[COMMAND_TIME], np.float64)
    _check_time(file, f'command/{cid}/{COMMAND_TIME}', t, strict=False)
    _check_leading(file, f'command/{cid}', fields, t.shape[0], 'command')
  for f in rec.initial:
    if f not in ('qpos', 'qvel'):
      raise recording_error(file, f'initial/{f}', "unknown key (known: initial/qpos, initial/qvel)")
  return rec
