"""The inertial device under validation: its channels and configured error model, read from the
resolved component config."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from fibril_mjx.core import registry
from fibril_mjx.errors import FibrilError

CHANNELS = ('angular_velocity', 'linear_acceleration')
UNITS = {'angular_velocity': 'rad/s', 'linear_acceleration': 'm/s²'}
SENSOR_FIELDS = ('orientation_sensor', 'gyroscope_sensor', 'accelerometer_sensor')
# six static poses: site name -> (xyaxes, axis pointing up, sign)
POSES = {'px': ('0 0 1 0 1 0', 0, 1.0), 'mx': ('0 0 -1 0 1 0', 0, -1.0),
         'py': ('1 0 0 0 0 1', 1, 1.0), 'my': ('1 0 0 0 0 -1', 1, -1.0),
         'pz': ('1 0 0 0 1 0', 2, 1.0), 'mz': ('1 0 0 0 -1 0', 2, -1.0)}
RATE_SITES = {'rx': ('0 0 1 0 1 0', 0), 'ry': ('1 0 0 0 0 1', 1), 'rz': ('1 0 0 0 1 0', 2)}
# Sweep tones as fractions of the output rate f_s; the last lies above Nyquist (alias 0.29 f_s).
TONES = (0.01, 0.04, 0.12, 0.22, 0.38, 0.71)
WINDOW = 1000      # sweep / rate-table analysis window, samples
SKIP = 200         # samples discarded before it (servo and filter transients)
SUBSTEPS = 4       # physics ticks per output period in the dynamic rig


# -------------------------------------------------------------------------------- model


@dataclasses.dataclass
class Channel:
  """Configured error model of one rate channel, normalized across component types."""
  name: str
  white_sigma: np.ndarray      # (3,) per-sample std of white noise (0 if none)
  ar1: list                    # per axis [(sigma, phi), ...]
  random_walk: np.ndarray      # (3,) K
  episode_stddev: np.ndarray   # (3,) per-episode bias std (turn-on, AHRS yaw-rate bias)
  bias: np.ndarray             # (3,)
  gain: np.ndarray             # (3, 3) I + diag(scale − 1) + M
  bandwidth_hz: float
  limit: float
  resolution: float
  noise_density: np.ndarray | None   # (3,) IMU only, for the report
  gm_sigma: np.ndarray | None
  gm_tau: np.ndarray | None


@dataclasses.dataclass(frozen=True)
class Inertial:
  """What the inertial rigs need of one type (the record its `validation_rig` part is).

  Attributes:
    channels: `(cfg, period_s) -> ({channel: Channel}, {Device field: value})`: the type's
      configured error model, normalized (`imu_channels`, `ahrs_channels`).
    orientation: the type delivers an `orientation` field (bound to a `framequat` sensor).
    random_walk: its channels have a rate random walk K (an Allan +1/2 slope).
    environment: its thermal and vibration models have rigs of their own.
  """
  channels: object
  orientation: bool = False
  random_walk: bool = False
  environment: bool = False


@dataclasses.dataclass
class Device:
  """The component under test: type, resolved config and its normalized model (`rig`: what
  the rigs need of its type)."""
  cid: str
  type: str
  config: dict                 # manifest field -> value (resolved, no sensor names)
  period_s: float
  channels: dict               # name -> Channel
  latency_s: float
  jitter_s: float
  loss_probability: float
  phase_s: float
  filter_rate: str = 'output'  # 'physics': the low-pass runs every physics tick (IMU option)
  orientation_sigma: np.ndarray | None = None
  orientation_rho: np.ndarray | None = None
  orientation_resolution: float = 0.0
  yaw_sign: float = 1.0
  rig: Inertial | None = None


def _vec(v):
  return np.asarray(v, np.float64).reshape(3)


def imu_channels(cfg: dict, p: float) -> tuple[dict, dict]:
  """The channels of a resolved `fibril_sim/imu` config (no further Device fields)."""
  chans = {}
  for ch in CHANNELS:
    nd = _vec(cfg.get(f'{ch}_noise_density', (0, 0, 0)))
    gm_s = _vec(cfg.get(f'{ch}_bias_instability_stddev', (0, 0, 0)))
    gm_t = _vec(cfg.get(f'{ch}_bias_correlation_time_s', (0, 0, 0)))
    white = nd / math.sqrt(p)
    bw = float(cfg.get(f'{ch}_bandwidth_hz', 0.0))
    ar1 = []
    for i in range(3):
      terms = []
      if gm_s[i] > 0:
        terms.append((gm_s[i], math.exp(-p / gm_t[i])))
      ar1.append(terms)
    if cfg.get('noise_before_filter') and bw > 0:
      # White noise through the first-order filter is AR(1) with φ = 1 − α.
      a = 1.0 - math.exp(-2 * math.pi * bw * p)
      for i in range(3):
        if white[i] > 0:
          ar1[i].append((white[i] * math.sqrt(a / (2 - a)), 1 - a))
      white = np.zeros(3)
    gain = np.diag(_vec(cfg.get(f'{ch}_scale', (1, 1, 1)))) + np.asarray(
        cfg.get(f'{ch}_misalignment', np.zeros((3, 3))), np.float64)
    chans[ch] = Channel(ch, white, ar1, _vec(cfg.get(f'{ch}_random_walk', (0, 0, 0))),
                        _vec(cfg.get(f'{ch}_bias_turn_on_stddev', (0, 0, 0))),
                        _vec(cfg.get(f'{ch}_bias', (0, 0, 0))), gain, bw,
                        float(cfg.get(f'{ch}_limit', 0.0)),
                        float(cfg.get(f'{ch}_resolution', 0.0)), nd, gm_s, gm_t)
  return chans, {}


def ahrs_channels(cfg: dict, p: float) -> tuple[dict, dict]:
  """The channels of a resolved `fibril_sim/ahrs` config, and its orientation fields."""
  chans = {}
  for ch in CHANNELS:
    sig = _vec(cfg.get(f'{ch}_noise_stddev', (0, 0, 0)))
    rho = _vec(cfg.get(f'{ch}_noise_correlation', (0, 0, 0)))
    ep = np.zeros(3)
    if ch == 'angular_velocity':
      ep[2] = float(cfg.get('yaw_rate_bias_stddev_rad_s', 0.0))
    lim = 'angular_velocity_limit_rad_s' if ch == 'angular_velocity' else \
        'linear_acceleration_limit_m_s2'
    chans[ch] = Channel(ch, np.zeros(3), [[(sig[i], rho[i])] if sig[i] > 0 else []
                                          for i in range(3)],
                        np.zeros(3), ep, _vec(cfg.get(f'{ch}_bias', (0, 0, 0))),
                        np.diag(_vec(cfg.get(f'{ch}_scale', (1, 1, 1)))),
                        float(cfg.get(f'{ch}_bandwidth_hz', 0.0)), float(cfg.get(lim, 0.0)),
                        float(cfg.get(f'{ch}_resolution', 0.0)), None, None, None)
  return chans, dict(
      orientation_sigma=_vec(cfg.get('orientation_noise_stddev_rad', (0, 0, 0))),
      orientation_rho=_vec(cfg.get('orientation_noise_correlation', (0, 0, 0))),
      orientation_resolution=float(cfg.get('orientation_resolution_rad', 0.0)),
      yaw_sign=float(cfg.get('orientation_yaw_sign', 1.0)))


def device_from_config(cid: str, ctype: str, cfg: dict) -> Device:
  """Normalizes a resolved config (manifest fields) of a type whose `validation_rig` part is an
  `Inertial` record (`fibril_sim/imu`, `fibril_sim/ahrs`)."""
  rig = registry.get(ctype).validation_rig
  if not isinstance(rig, Inertial):
    raise FibrilError(f'{ctype}: not an inertial type (its validation_rig is '
                      f'{type(rig).__name__ if rig is not None else None})')
  p = float(cfg['period_s'])
  chans, more = rig.channels(cfg, p)
  return Device(cid, ctype, cfg, p, chans, float(cfg.get('latency_s', 0.0)),
                float(cfg.get('jitter_s', 0.0)), float(cfg.get('loss_probability', 0.0)),
                float(cfg.get('phase_s', 0.0)), str(cfg.get('filter_rate', 'output')),
                rig=rig, **more)
