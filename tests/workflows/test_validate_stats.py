"""`validate`'s tolerances at small world counts: a nominal device fails a check at the level
of `K_SIGMA` known-σ standard errors (`common.LEVEL`, 6.3e-5), whatever the number of worlds.

Closed forms and simulated normal samples (fixed seeds), no rig: the Student-t and F quantiles
against their closed forms at small degrees of freedom, the false-failure rate of each rule on
simulated samples against `LEVEL`, and the six-orientation checks fed record means drawn from
the configured unit scatter (the case that failed a nominal device 1 time in ~20 at 8 worlds).
"""

import math

import numpy as np
from scipy import stats as sps

from fibril_mjx.workflows.validate import common
from fibril_mjx.workflows.validate.inertial import device, static

G = 9.80665


def _poisson_max(mean):
  """A count of independent rare events that a Poisson(mean) count exceeds with 1e-4."""
  return int(sps.poisson.isf(1e-4, mean))


def test_k_student_is_the_t_quantile_at_the_level_of_k_sigma():
  level = 2 * 0.5 * math.erfc(common.K_SIGMA / math.sqrt(2))
  assert math.isclose(common.LEVEL, level, rel_tol=1e-12)
  # closed forms: t with 1 dof is Cauchy, with 2 dof t = (1 − 2a)/√(2a(1 − a)) (a = LEVEL/2)
  a = level / 2
  assert math.isclose(common.k_student(2), 1 / math.tan(math.pi * a), rel_tol=1e-9)
  assert math.isclose(common.k_student(3), (1 - 2 * a) / math.sqrt(2 * a * (1 - a)),
                      rel_tol=1e-9)
  # many units: the normal quantile
  assert math.isclose(common.k_student(10 ** 7), common.K_SIGMA, rel_tol=1e-5)


def test_k_complex_is_the_f_2_quantile_at_the_level():
  # F(2, d) has the closed tail (1 + 2x/d)^(−d/2): x = d/2·(LEVEL^(−2/d) − 1)
  for n in (2, 4, 8, 16):
    d = 2 * n - 2
    x = d / 2 * (common.LEVEL ** (-2 / d) - 1)
    assert math.isclose(common.k_complex(n) ** 2, x, rel_tol=1e-9)


def test_the_t_rule_fails_normal_samples_at_the_level():
  """|mean| ≤ k·s/√n on n normal units: the false-failure rate is LEVEL at 4 and 8 units (the
  old rule, 4 sample-σ, fails 2.8 % and 0.5 %)."""
  g = np.random.default_rng(0)
  for n in (4, 8):
    trials = 400_000
    x = g.standard_normal((trials, n))
    t = np.abs(x.mean(1)) / (x.std(1, ddof=1) / math.sqrt(n))
    fails = int(np.sum(t > common.k_student(n)))
    assert fails <= _poisson_max(trials * common.LEVEL), (n, fails)
    assert np.mean(t > common.K_SIGMA) > 0.004        # what the normal quantile did


def test_the_complex_rule_fails_complex_normal_samples_at_the_level():
  """|h̄ − h| ≤ k·RMS std error on n circular complex units: the false-failure rate is LEVEL."""
  g = np.random.default_rng(1)
  for n in (4, 8):
    trials = 400_000
    z = g.standard_normal((trials, n)) + 1j * g.standard_normal((trials, n))
    m = z.mean(1)
    se = np.sqrt(np.sum(np.abs(z - m[:, None]) ** 2, 1) / (n - 1) / n)
    fails = int(np.sum(np.abs(m) > common.k_complex(n) * se))
    assert fails <= _poisson_max(trials * common.LEVEL), (n, fails)


TURN_ON = {'angular_velocity': 3.5e-3, 'linear_acceleration': 0.05}
DENSITY = {'angular_velocity': 4.8869e-5, 'linear_acceleration': 6.8647e-4}
PERIOD, SAMPLES = 0.002, 20000


def _device():
  cfg = {'period_s': PERIOD}
  for ch in TURN_ON:
    cfg[f'{ch}_noise_density'] = [DENSITY[ch]] * 3
    cfg[f'{ch}_bias_turn_on_stddev'] = [TURN_ON[ch]] * 3
  return device.device_from_config('imu', 'fibril_sim/imu', cfg)


def _failed_elements(check):
  m, c, t = (np.asarray(check.measured, float), np.asarray(check.configured, float),
             np.asarray(check.tolerance, float))
  return int(np.sum(np.abs(m - c) > t))


def test_six_orientation_fails_a_nominal_device_at_the_level():
  """Record means of a nominal device — each pose of each world a unit whose mean scatters by
  √(turn-on² + σ_white²/n) (written here, independently of `static._unit_std`) — fail the
  gain and bias elements at the level LEVEL at 4, 8 and 16 worlds (the issue's case, 8 worlds:
  4 sample-σ of the bias failed 0.5 % of its elements)."""
  dev = _device()
  g = np.random.default_rng(2)
  trials, elements, fails = 1500, 0, 0
  for w in (4, 8, 16):
    for _ in range(trials):
      for name, ch in dev.channels.items():
        s = math.sqrt(TURN_ON[name] ** 2 + (DENSITY[name] / math.sqrt(PERIOD)) ** 2 / SAMPLES)
        means = s * g.standard_normal((w, 6, 3))
        if name == 'linear_acceleration':
          for p, (_, a, sign) in enumerate(device.POSES.values()):
            means[:, p, a] += sign * G
        checks = static._six_orientation(dev, ch, means, SAMPLES, None)
        for c in checks:
          if c.name.endswith(('.gain', '.bias')):
            elements += np.size(c.measured)
            fails += _failed_elements(c)
  assert elements == trials * 3 * (3 + 12)
  assert fails <= _poisson_max(elements * common.LEVEL), fails


def test_six_orientation_still_finds_a_bias_of_a_few_standard_errors():
  """The configured std keeps the power of K_SIGMA standard errors: a 0.05 m/s² accelerometer
  bias (the perturbation `test_validate.py` resolves at 8 worlds) fails the bias check at 8
  worlds (a Student-t tolerance on 8 worlds' sample std, 8.47 standard errors, would not)."""
  dev = _device()
  ch = dev.channels['linear_acceleration']
  g = np.random.default_rng(3)
  misses = 0
  for _ in range(200):
    means = TURN_ON['linear_acceleration'] * g.standard_normal((8, 6, 3)) + [0.05, 0, 0]
    for p, (_, a, sign) in enumerate(device.POSES.values()):
      means[:, p, a] += sign * G
    bias = [c for c in static._six_orientation(dev, ch, means, SAMPLES, None)
            if c.name.endswith('.bias')][0]
    misses += bias.passed
  # 0.05 is 6.9 standard errors (0.05/√48); missed when the estimate falls 2.9 σ short
  assert misses <= _poisson_max(200 * sps.norm.cdf(-2.9)), misses
