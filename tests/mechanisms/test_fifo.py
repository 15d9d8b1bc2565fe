"""FIFO delivery (`fibril_mjx/mechanisms/fifo.py`), `manifests/imu_fifo.yaml`.

Reference, float64 NumPy, written here: an independent simulation of each component's FIFO —
samples enter at the acquisition ticks (ODR), a full FIFO drops the oldest or the newest, the
reader starts a read at its own instants (`ceil((phase + i·period) / dt)`) or when the FIFO
holds the watermark, never while one is in flight, takes `min(count, read_max)` oldest samples
and receives them `ceil(delay / dt)` ticks later. The sample values come from a twin of the
manifest with the default delivery queue (same component ids, so the same noise draws): FIFO
delivery must change when a consumer sees each sample, never its value or its stamp.

The FIFO side is `fibril-mjx run` itself (its `trace.npz` and `summary.json`), so the run
trace and, through a `Batch` rebuilt from it, the recording writer are checked with it.
"""

from __future__ import annotations

import collections
import json
import math
import pathlib

import jax
import numpy as np
import pytest
import yaml

import fibril_mjx
from fibril_mjx.analysis import common
from fibril_mjx.io.recording import recording_from_trace
from fibril_mjx.mechanisms import fifo
from fibril_mjx.workflows import run as run_mod

REPO = pathlib.Path(__file__).resolve().parents[2]
MANIFEST = REPO / 'manifests' / 'imu_fifo.yaml'
DURATION_S = 0.4
WORLDS = 2
FIELDS = ('angular_velocity', 'linear_acceleration')


def _ticks(seconds, dt):
  return int(math.ceil(seconds / dt - 1e-9))


def reference(cfg, dt, n_ticks):
  """`({arrival tick: [sequence, ...]}, acquisition tick of each sequence, lost)`."""
  acq = [_ticks(cfg['phase_s'] + n * cfg['period_s'], dt) for n in range(10 * n_ticks)]
  acq = [k for k in acq if k <= n_ticks]
  depth, read_max = cfg['fifo_depth'], cfg['fifo_read_max'] or cfg['fifo_depth']
  delay = _ticks(cfg['fifo_read_delay_s'], dt)
  reads = set()
  if cfg['fifo_read_period_s'] > 0:
    reads = {_ticks(cfg['fifo_read_phase_s'] + i * cfg['fifo_read_period_s'], dt)
             for i in range(n_ticks + 1)}
  q, pending, out, lost = collections.deque(), None, {}, 0
  by_tick = collections.defaultdict(list)
  for n, k in enumerate(acq):
    by_tick[k].append(n)
  for k in range(n_ticks + 1):
    for n in by_tick[k]:
      if len(q) == depth:
        lost += 1
        if cfg['fifo_overflow'] == 'drop_oldest':
          q.popleft()
          q.append(n)
      else:
        q.append(n)
    if pending is not None and pending[0] <= k:
      out[k], pending = pending[1], None
    due = k in reads if reads else len(q) >= cfg['fifo_watermark']
    if due and pending is None and q:
      pending = (k + delay, [q.popleft() for _ in range(min(len(q), read_max))])
    if pending is not None and pending[0] <= k:
      out[k], pending = pending[1], None
  return out, np.asarray(acq), lost


def _config(cid):
  doc = yaml.safe_load(MANIFEST.read_text())
  c = next(c['config'] for c in doc['components'] if c['id'] == cid)
  period = 0.002   # profiles/icm42688p_nominal.yaml
  out = {'period_s': period, 'phase_s': 0.0}
  for f in fifo.FIELDS:
    out[f] = c.get(f, fifo.FifoConfig.model_fields[f].default)
  return out


@pytest.fixture(scope='module')
def fifo_run(tmp_path_factory):
  out = tmp_path_factory.mktemp('fifo') / 'run'
  run_mod.run(MANIFEST, worlds=WORLDS, seed=0, duration_s=DURATION_S, out=out,
              options=run_mod.RunOptions(segments=2))
  z = dict(np.load(out / 'trace.npz'))
  summary = json.loads((out / 'summary.json').read_text())
  return z, summary


@pytest.fixture(scope='module')
def twin(tmp_path_factory):
  """The same manifest with the delivery queue: every acquisition delivered at its tick."""
  doc = yaml.safe_load(MANIFEST.read_text())
  doc['model'] = str(REPO / 'assets' / 'examples' / 'turntable.xml')
  for c in doc['components']:
    c['config'] = {k: v for k, v in c['config'].items()
                   if k != 'delivery' and not k.startswith('fifo_')}
  p = tmp_path_factory.mktemp('twin') / 'twin.yaml'
  p.write_text(yaml.safe_dump(doc))
  sim = fibril_mjx.load(p)
  n_ticks = _ticks(DURATION_S, sim.dt)
  _, trace, _ = sim.rollout(sim.default_params(WORLDS), fibril_mjx.world_keys(0, WORLDS), n_ticks)
  return sim, common.flatten(jax.device_get(trace)), n_ticks


def _values_by_sequence(z, cid, field, w):
  new = z[f'sensor/{cid}/new_data'][w].astype(bool)
  seq = z[f'sensor/{cid}/sequence'][w][new]
  assert np.array_equal(seq, np.arange(seq.size))   # the twin delivers every acquisition
  return z[f'sensor/{cid}/{field}'][w][new].astype(np.float64)


@pytest.mark.parametrize('cid', ['imu', 'imu_watermark', 'imu_late'])
def test_batches_match_the_reference_fifo(fifo_run, twin, cid):
  z, summary = fifo_run
  sim, tz, n_ticks = twin
  cfg = _config(cid)
  ref, acq, lost = reference(cfg, sim.dt, n_ticks)
  b = int(cfg['fifo_read_max'] or cfg['fifo_depth'])
  g = common.group(z, 'sensor', cid)
  assert g['angular_velocity'].shape == (WORLDS, n_ticks + 1, b, 3)
  for w in range(WORLDS):
    vals = {f: _values_by_sequence(tz, cid, f, w) for f in FIELDS}
    new = g['new_data'][w].astype(bool)
    assert sorted(np.flatnonzero(new)) == sorted(ref), 'read arrival ticks'
    for k, seqs in ref.items():
      m = len(seqs)
      assert int(g['count'][w, k]) == m
      assert g['arrival_tick'][w, k] == k
      assert np.array_equal(g['sequence'][w, k, :m], seqs)
      assert np.all(g['sequence'][w, k, m:] == -1)
      assert np.array_equal(g['sample_tick'][w, k, :m], acq[seqs])   # acquisition stamps
      for f in FIELDS:
        np.testing.assert_allclose(g[f][w, k, :m], vals[f][seqs], rtol=0, atol=1e-6)
  status = summary['components'][cid]['status']
  assert status['overflow'] == WORLDS * lost
  if cid != 'imu':
    assert lost > 0      # the example's slow readers do overflow
  else:
    assert lost == 0


def _batch(z, cid):
  g = common.group(z, 'sensor', cid)
  names = [k for k in g if k not in fifo.BOOK]
  sample = collections.namedtuple('Sample', names)(*(g[k] for k in names))
  return fifo.Batch(sample, *(g[k] for k in fifo.BOOK))


def test_recording_and_per_sample_views(fifo_run, twin):
  z, _ = fifo_run
  sim, _, n_ticks = twin
  cfg = _config('imu_late')
  ref, acq, _ = reference(cfg, sim.dt, n_ticks)
  seqs = [n for k in sorted(ref) for n in ref[k]]
  arrivals = [k for k in sorted(ref) for _ in ref[k]]
  trace = {'sensor': {'imu_late': _batch(z, 'imu_late')}, 'truth': {}}
  rec = recording_from_trace(trace, world=1, dt=sim.dt)
  s = rec.sensors['imu_late']
  assert np.array_equal(s['sequence'], seqs)
  np.testing.assert_allclose(s['sample_time_s'], acq[seqs] * sim.dt, rtol=1e-12)
  np.testing.assert_allclose(s['arrival_time_s'], np.asarray(arrivals) * sim.dt, rtol=1e-12)
  assert s['angular_velocity'].shape == (len(seqs), 3)
  # the acquisition-time view the run's metrics and plots read: each sample at its stamp
  v = common.per_sample(common.group(z, 'sensor', 'imu_late'))
  new = v['new_data'][1]
  assert np.array_equal(np.flatnonzero(new), acq[seqs])
  assert np.array_equal(v['sequence'][1][new], seqs)
  assert np.array_equal(v['arrival_tick'][1][new], arrivals)
  g = common.group(z, 'sensor', 'imu_late')
  first = min(ref)
  np.testing.assert_array_equal(v['angular_velocity'][1][acq[ref[first][0]]],
                                g['angular_velocity'][1, first, 0])


def test_queue_delivery_compiles_no_fifo(twin):
  sim = twin[0]
  c = sim.components['imu']
  assert not isinstance(c.transport, fifo.Fifo) and list(c.schedules) == ['acquisition']
  state = jax.eval_shape(lambda: c.init(c.default_params(), fibril_mjx.world_keys(0, 1)[0]))
  assert not isinstance(state.queue, fifo.FifoState)
  assert not isinstance(state.held, fifo.Batch)


def test_plan_describes_the_fifo():
  sim = fibril_mjx.load(MANIFEST)
  lines = '\n'.join(sim.components['imu_watermark'].describe())
  assert ('transport: fifo: depth 8 samples, reads at watermark 6 samples, at most 4 per '
          'read, read delay 0.01 s = 5 ticks, overflow drop_newest') in lines
  assert fifo.READ in sim.components['imu'].schedules


def _load_with(tmp_path, cid, **fields):
  doc = yaml.safe_load(MANIFEST.read_text())
  doc['model'] = str(REPO / 'assets' / 'examples' / 'turntable.xml')
  c = next(c for c in doc['components'] if c['id'] == cid)
  for k, v in fields.items():
    if v is None:
      c['config'].pop(k, None)
    else:
      c['config'][k] = v
  p = tmp_path / 'bad.yaml'
  p.write_text(yaml.safe_dump(doc))
  fibril_mjx.load(p)


@pytest.mark.parametrize('cid, fields, message', [
    ('imu', {'latency_s': 0.004}, r'bad\.yaml: components\[0\]\.config\.latency_s = 0\.004: '
     r'must be 0 with delivery: fifo \(the FIFO read delay is fifo_read_delay_s\)'),
    ('imu', {'fifo_watermark': 4}, r'components\[0\]\.config\.fifo_watermark = 4: delivery: '
     r'fifo needs exactly one of fifo_watermark \(> 0\) or fifo_read_period_s \(> 0\)'),
    ('imu_watermark', {'fifo_watermark': 9}, r'components\[1\]\.config\.fifo_watermark = 9: '
     r'must be <= fifo_depth = 8'),
    ('imu_watermark', {'fifo_read_max': 9}, r'fifo_read_max = 9: must be <= fifo_depth = 8 '
     r'\(0: fifo_depth\)'),
    ('imu', {'fifo_read_delay_s': 0.012}, r'fifo_read_delay_s = 0\.012: must be at most the '
     r'read period: 6 ticks of dt = 0\.002 s, reads can be 5 ticks apart \(one read in '
     r'flight\)'),
    ('imu_watermark', {'fifo_read_phase_s': 0.002}, r'fifo_read_phase_s = 0\.002: only with '
     r'fifo_read_period_s'),
    ('imu_late', {'delivery': None}, r'components\[2\]\.config\.fifo_depth = 12: only with '
     r'delivery: fifo'),
    ('imu', {'fifo_overflow': 'wrap'}, r"components\[0\]\.config\.fifo_overflow = 'wrap': "),
])
def test_config_errors(tmp_path, cid, fields, message):
  with pytest.raises(fibril_mjx.FibrilError, match=message):
    _load_with(tmp_path, cid, **fields)


def test_an_estimator_refuses_a_fifo_imu():
  ov = {'components': [{'component': 'imu', 'field': f, 'value': v}
                       for f, v in [('delivery', 'fifo'), ('fifo_read_period_s', 0.01)]]}
  with pytest.raises(fibril_mjx.FibrilError, match=r"components\[1\]\.config\.imu = 'imu': the "
                     r"attitude EKF reads one IMU sample per tick; 'imu' delivers FIFO batches"):
    fibril_mjx.load(REPO / 'manifests' / 'imu_ekf.yaml', overrides=ov)


def _synthetic(cfg, dt, n_ticks, worlds=2):
  """A `Batch` trace `(W, T, B)` built from this file's reference FIFO (values: zeros)."""
  ref, acq, _ = reference(cfg, dt, n_ticks)
  b = int(cfg['fifo_read_max'] or cfg['fifo_depth'])
  shape = (worlds, n_ticks + 1)
  count, new = np.zeros(shape, np.int32), np.zeros(shape, bool)
  seq, st = np.full(shape + (b,), -1, np.int32), np.full(shape + (b,), -1, np.int32)
  for k, s in ref.items():
    count[:, k], new[:, k] = len(s), True
    seq[:, k, :len(s)], st[:, k, :len(s)] = s, acq[s]
  sample = collections.namedtuple('Sample', FIELDS)(*(np.zeros(shape + (b, 3), np.float32)
                                                      for _ in FIELDS))
  return fifo.Batch(sample, count, new, seq, st, np.broadcast_to(np.arange(n_ticks + 1), shape),
                    np.logical_or.accumulate(new, axis=1))


@pytest.mark.parametrize('cid', ['imu', 'imu_watermark', 'imu_late'])
def test_validate_timing_reads_batches(tmp_path, cid):
  """`validate`'s FIFO timing (`validate/fifo_timing.py`) passes batches built from this
  file's reference and fails, naming `timing.batch` and `timing.latency`, when one read
  arrives a tick late."""
  from fibril_mjx.workflows.validate import fifo_timing
  from fibril_mjx.workflows.validate.inertial.device import device_from_config
  cfg = _config(cid)
  dev = device_from_config('dut', 'fibril_sim/imu', {**cfg, 'delivery': 'fifo'})
  dt, n_ticks = 0.002, 300
  good = _synthetic(cfg, dt, n_ticks)
  checks = {c.name: c for c in fifo_timing.checks(dev, dt, {'s': good}, tmp_path)}
  assert sorted(checks) == ['timing.batch', 'timing.jitter', 'timing.latency', 'timing.loss',
                            'timing.period']
  assert all(c.passed for c in checks.values()), [c for c in checks.values() if not c.passed]
  ref, _, lost = reference(cfg, dt, n_ticks)
  assert (checks['timing.loss'].measured > 0) == (lost > 0)
  k = sorted(ref)[3]   # one read a tick late
  late = good._replace(**{f: np.array(getattr(good, f)) for f in ('count', 'new_data',
                                                                   'sequence', 'sample_tick')})
  for f in ('count', 'new_data', 'sequence', 'sample_tick'):
    getattr(late, f)[0, k + 1] = getattr(late, f)[0, k]
  late.new_data[0, k] = False
  assert k + 1 not in ref          # reads are at least 5 ticks apart in the example
  failed = {c.name for c in fifo_timing.checks(dev, dt, {'s': late}, tmp_path) if not c.passed}
  assert {'timing.batch', 'timing.latency'} <= failed <= {'timing.batch', 'timing.latency',
                                                          'timing.jitter'}
