"""The figures of the inertial validation (Allan, six orientations, rate table, range, Bode)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fibril_mjx.analysis import plotting
from fibril_mjx.workflows.validate.common import K_SIGMA, axis_name
from fibril_mjx.workflows.validate.inertial.signals import h_discrete


# -------------------------------------------------------------------------------- plots


def plot_allan(fig_dir, ch_name, units, rows):
  """The measured vs configured Allan deviation per axis of one channel (`rows`: per axis
  `(axis, taus, adev, model, relative σ)`), saved under `fig_dir`; returns its path."""
  plt = plotting.pyplot()
  fig, ax = plt.subplots(figsize=(7, 5))
  for (i, taus, adev, model, rel), c in zip(rows, ('tab:red', 'tab:green', 'tab:blue')):
    ax.loglog(taus, adev, '.', color=c, label=f'{axis_name(i)} measured')
    ax.fill_between(taus, model * (1 - K_SIGMA * rel), model * (1 + K_SIGMA * rel), color=c,
                    alpha=0.15)
    ax.loglog(taus, model, '-', color=c, lw=0.8, label=f'{axis_name(i)} configured')
  ax.set_xlabel('τ [s]')
  ax.set_ylabel(f'Allan deviation [{units}]')
  ax.set_title(f'static run: {ch_name} (band: ±{K_SIGMA:g}σ)')
  ax.grid(True, which='both', alpha=0.3)
  ax.legend(fontsize=7)
  path = fig_dir / f'static_allan_{ch_name}.png'
  return plotting.save(fig, path)


class Tones(NamedTuple):
  """The sine-sweep tones of one channel and the channel's response at them.

  Attributes:
    hz: `(k,)` tone frequencies (Hz).
    alias_hz: `(k,)` the frequency each tone shows at in the output (Hz).
    above: `(k,)` bool, the tone lies above the output Nyquist frequency.
    measured, expected: `(k,)` complex responses H (measured, of the configured filter).
  """

  hz: np.ndarray
  alias_hz: np.ndarray
  above: np.ndarray
  measured: np.ndarray
  expected: np.ndarray


def plot_bode(fig_dir, ch_name, tones: Tones, fs, bw, rate, dt):
  """Measured vs expected gain and phase per tone of one channel against the configured
  filter's curve (bandwidth `bw` Hz run at `rate`: 'physics' every `dt` s, else at the output
  rate `fs` Hz), saved under `fig_dir`; returns its path."""
  alias, above, h, h_exp = tones.alias_hz, tones.above, tones.measured, tones.expected
  plt = plotting.pyplot()
  fig, (a1, a2) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
  f = np.linspace(fs / 1000, fs / 2, 500)
  hc = h_discrete(f, bw, 1 / dt if rate == 'physics' else fs)
  a1.semilogx(f, 20 * np.log10(np.abs(hc)), 'k-', lw=0.8, label=f'configured ({rate} rate)')
  a1.semilogx(alias, 20 * np.log10(np.abs(h_exp)), 'k+', ms=8, label='expected per tone')
  a2.semilogx(f, np.degrees(np.angle(hc)), 'k-', lw=0.8)
  a1.semilogx(alias[~above], 20 * np.log10(np.abs(h[~above])), 'o', label='measured tone')
  a1.semilogx(alias[above], 20 * np.log10(np.abs(h[above])), 's', color='tab:red',
              label=f'tone {tones.hz[above][0]:.4g} Hz > Nyquist, at its alias')
  a2.semilogx(alias, np.degrees(np.angle(h)), 'o')
  a2.semilogx(alias[above], np.degrees(np.angle(h[above])), 's', color='tab:red')
  a1.axvline(fs / 2, color='gray', ls=':')
  a1.set_ylabel('gain [dB]')
  a2.set_ylabel('phase [deg]')
  a2.set_xlabel('frequency at the output [Hz]')
  a1.legend(fontsize=7)
  a1.set_title(f'sine sweep: {ch_name} (bandwidth {bw:g} Hz, output rate {fs:g} Hz)')
  path = fig_dir / f'bode_{ch_name}.png'
  return plotting.save(fig, path)
