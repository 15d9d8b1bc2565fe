"""Recordings in, and the Allan fit of a channel: pooled deviation, the N/B/K model, the held-out
check and the unit-to-unit dispersion."""

from __future__ import annotations

import math
import pathlib

import numpy as np

from fibril_mjx.io import bags
from fibril_mjx.io import recording as rc
from fibril_mjx.analysis import stats
from fibril_mjx.errors import FibrilError


G = 9.80665
TYPES = ('fibril_sim/imu', 'fibril_sim/ahrs')
CHANNELS = ('angular_velocity', 'linear_acceleration')
HELDOUT = 0.3
K_SIGMA = 4.0


def load(path, csv_map=None, topics=None, component_type=None, component=None):
  """A recording from `.npz` / `.parquet`, `.csv` with a column mapping (dict), or a ROS bag
  with a topic mapping (`fibril_mjx.io.bags`)."""
  path = pathlib.Path(path)
  if bags.is_bag(path):
    if topics is None:
      raise FibrilError(f'{path}: a ROS bag needs --topics ID=TOPIC[,ID=TOPIC] (e.g. '
                        'imu=/imu/data)')
    types = {component: component_type} if component else None
    return rc.read_recording(path, topics=topics, types=types)
  if path.suffix == '.csv':
    if csv_map is None:
      raise FibrilError(f'{path}: a CSV recording needs --csv-map (column mapping YAML)')
    return rc.read_csv(path, csv_map[0], mapping_file=csv_map[1])
  return rc.read_recording(path)


def delivered_samples(fields, field):
  """Delivered samples in order (lost ones dropped, not filled: a repeated white sample would
  bias the white level; the τ axis stretches by 1/(1 − loss)) and the rate in Hz."""
  t = np.asarray(fields[rc.SAMPLE_TIME], np.float64)
  x = np.asarray(fields[field], np.float64)
  period = float(np.median(np.diff(t)))
  return x, 1.0 / period


def split_heldout(records):
  """`(fit, heldout, how)`: whole logs when ≥ 3, else each log split in time."""
  if len(records) >= 3:
    k = max(1, int(round(HELDOUT * len(records))))
    return records[:-k], records[-k:], f'last {k} of {len(records)} logs held out'
  fit, held = [], []
  for r in records:
    n = r.shape[0]
    cut = int(round((1 - HELDOUT) * n))
    fit.append(r[:cut])
    held.append(r[cut:])
  return fit, held, f'last {int(HELDOUT * 100)} % of each log (in time) held out'


def _pool_allan(recs, rate):
  n = min(r.shape[0] for r in recs)
  x = np.stack([r[:n] - r[:n].mean() for r in recs])
  m = stats.allan_cluster_sizes(n)
  taus, adev, rel = stats.allan_deviation_pooled(x, rate, m)
  return m, taus, adev, rel, n


def fit_allan(recs, rate):
  """Weighted least squares of the exact AVAR model to pooled Allan deviations.

  Returns:
    dict with N, K (and gm_sigma, gm_tau_s when selected), their standard errors, chi2.
  """
  from scipy import optimize
  m, taus, adev, rel, n = _pool_allan(recs, rate)
  avar = adev ** 2
  s_var = 2 * rel * avar          # std of the Allan variance estimate
  dt = 1.0 / rate
  base = [1.0 / m, (m * dt) / 3.0 * (1 + 1 / (2 * m * m))]

  def solve(cols):
    a = np.stack(cols, -1) / s_var[:, None]
    b = avar / s_var
    coef, _ = optimize.nnls(a, b)
    chi2 = float(np.sum((a @ coef - b) ** 2))
    cov = np.linalg.pinv(a.T @ a)
    return coef, chi2, cov

  best = solve(base) + (None,)
  t_max = n * dt / 3
  for tau_c in np.logspace(np.log10(10 * dt), np.log10(max(t_max, 20 * dt)), 25):
    phi = math.exp(-dt / tau_c)
    col = stats.allan_variance_model(m, rate, ar1=[(1.0, phi)])
    res = solve(base + [col]) + (tau_c,)
    if res[0][2] > 0 and res[1] < best[1] - 10.0:
      best = res if best[3] is None or res[1] < best[1] else best
  coef, chi2, cov, tau_c = best
  # Neighbouring τ share data: scale the independent-point errors by √(points per octave).
  se = np.sqrt(np.maximum(np.diag(cov), 0)) * math.sqrt(max(1.0, taus.size / max(
      np.log2(taus[-1] / taus[0]), 1.0)))
  white_var, k2 = coef[0], coef[1]
  out = {'N': math.sqrt(white_var * dt), 'N_se': 0.5 * se[0] / max(white_var, 1e-300)
         * math.sqrt(white_var * dt), 'K': math.sqrt(k2),
         'K_se': 0.5 * se[1] / math.sqrt(k2) if k2 > 0 else math.sqrt(se[1]),
         'chi2': chi2, 'dof': int(taus.size - len(coef)), 'taus': (taus, adev, rel)}
  if tau_c is not None:
    out.update(gm_sigma=math.sqrt(coef[2]), gm_sigma_se=0.5 * se[2] / math.sqrt(coef[2]),
               gm_tau_s=float(tau_c))
  return out


def _model_adev(fit, m, rate):
  ar1 = [(fit['gm_sigma'], math.exp(-1 / (rate * fit['gm_tau_s'])))] if 'gm_sigma' in fit else []
  return np.sqrt(stats.allan_variance_model(m, rate, white_sigma=fit['N'] * math.sqrt(rate),
                                            ar1=ar1, random_walk=fit['K']))


def heldout_allan(held, rate, fit):
  """The held-out records' pooled Allan deviation against the `fit` model: the largest
  deviation in σ of the estimator, whether all are within `K_SIGMA`, and the curves."""
  m, taus, adev, rel, _ = _pool_allan(held, rate)
  model = _model_adev(fit, m, rate)
  z = np.abs(adev / model - 1) / rel
  return {'max_dev_sigma': float(z.max()), 'within': bool(np.all(z < K_SIGMA)),
          'curve': (taus, adev, model, rel)}


def episode_dispersion(means, var_noise):
  """Unit-to-unit (episode-to-episode) standard deviation of `means` with the noise's share
  `var_noise` of their variance removed, and its standard error; `(None, None)` below 3."""
  if len(means) < 3:
    return None, None
  s = float(np.std(means, ddof=1))
  v = max(s * s - var_noise, 0.0)
  return math.sqrt(v), math.sqrt(v + var_noise) / math.sqrt(2 * (len(means) - 1))
