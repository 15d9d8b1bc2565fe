"""The held-out verdict per axis, and what the model cannot explain: Allan deviation outside
the model (τ range, by how much), PSD lines the model lacks or has in excess, motion left in a
stretch, and the likely cause."""

from __future__ import annotations

import numpy as np

from fibril_mjx.workflows.fit_profile import allan, session, spectral
from fibril_mjx.workflows.fit_profile.allan import K_SIGMA, REL_RESOLVED

#: exit status of `fibril-mjx fit-profile` when the fitted model does not reproduce the
#: held-out part of the logs on some axis (distinct from 1, a failure to run)
EXIT_DISAGREE = 3


def _shape_cause(sign, shortest):
  """The likely cause of an Allan deviation the fitted terms cannot follow in the fitting part
  too: `sign` +1 above the model, −1 below; `shortest`: the run starts at the band's shortest
  τ (2 samples)."""
  if shortest and sign < 0:
    return ('less noise than white at the shortest τ: an output low-pass filter or averaging '
            'the model lacks (neighbouring samples correlated)')
  if shortest:
    return ('more noise than white at the shortest τ: high-frequency noise the model lacks '
            '(a vibration line near the Nyquist frequency, noise from differencing, an output '
            'step coarser than fitted); a low-pass filter would put the data below the model')
  return ('a noise shape the model\'s terms cannot follow at that τ (the fitting part misses it '
          'there too: coloured noise, e.g. a second correlation time)')


def explain(name, held, fit_recs, rate, fit, h, times=()):
  """What the model cannot explain on one axis (empty when the held-out part agrees).

  Args:
    name: axis label, e.g. `gyro z`.
    held, fit_recs: held-out and fitting records `(n_i,)` of the axis.
    rate: sample rate Hz; `fit`: `allan.fit_allan`'s result; `h`: `allan.heldout_allan`'s.
    times: `(t0, t1)` of each held-out record in the log's time (s), for the motion report.

  Returns:
    `(findings, cause)`: list of strings, and the likely cause (a string, or None).
  """
  findings, causes = [], []
  taus, adev, model, _ = h['curve']
  z = h['z']
  ft, fa, frel = fit['taus']
  fm = np.sqrt(allan.model_avar(fit, np.round(ft * rate).astype(np.int64), rate))
  fz = (fa / fm - 1) / frel
  band = np.flatnonzero(h['band'])
  for sign, word in ((1, 'above'), (-1, 'below')):
    for i, j in session.true_runs(h['band'] & (sign * z > K_SIGMA)):
      r = float(np.max(np.abs(adev[i:j + 1] / model[i:j + 1] - 1)))
      span = (f'τ≈{taus[i]:.3g} s' if i == j else f'τ {taus[i]:.3g}–{taus[j]:.3g} s')
      kind = 'bump' if sign > 0 and band[0] < i and j < band[-1] else 'deviation'
      findings.append(f'Allan {kind} {word} the model by up to {100 * r:.0f} % at {span}')
      near = (ft >= 0.99 * taus[i]) & (ft <= 1.01 * taus[j])
      if np.any(sign * fz[near] > K_SIGMA):
        causes.append(_shape_cause(sign, i == band[0]))
      elif sign > 0 and j == band[-1]:
        causes.append('slow drift beyond the model (temperature, bias instability) or motion')
  model_lines = fit.get('lines', ())
  if sum(len(r) for r in held) >= 256:
    lines, spec = spectral.find_lines(held, rate)
    df = float(spec[0][1] - spec[0][0])
    for ln in lines[:3]:
      if not any(abs(ln['f0'] - m['f0']) <= max(3 * m['bandwidth_hz'], 2 * df)
                 for m in model_lines):
        findings.append(f"PSD line at {ln['f0']:.3g} Hz ({ln['ratio']:.0f}× the floor) not in "
                        'the model')
        causes.append('a vibration line that is not in the fitting part (it comes and goes)')
    for m in model_lines:
      if not any(abs(ln['f0'] - m['f0']) <= max(3 * m['bandwidth_hz'], 2 * df) for ln in lines):
        findings.append(f"the model's line at {m['f0']:.3g} Hz is absent from the held-out part")
        causes.append('a vibration line that stopped (not a property of the unit)')
  floor = session.motion_floor(held, rate, model_lines)   # pooled: short pieces are checked too
  for k, r in enumerate(held):
    t0 = times[k][0] if k < len(times) else 0.0
    for a, b in session.motion_left(r, rate, t0, model_lines, floor):
      findings.append(f'motion left in the stretch at t {a:.1f}–{b:.1f} s (window std ≥ '
                      f'{session.MOTION_FACTOR:g}× the median over the held-out part)')
      causes.insert(0, 'motion left in the stretch: the unit was not at rest')
  cause = causes[0] if causes else ('the noise changed between the fitting and held-out parts'
                                    if findings else None)
  return findings, cause


def line(name, h, findings, cause):
  """One console line of the verdict of an axis: pass or fail in words first, then the
  numbers."""
  band = 'τ from 2 samples to a tenth of the record'
  if h['within']:
    head = (f"{name}: agrees (pass) — held-out Allan deviation at most {h['max_dev_sigma']:.1f} σ "
            f"from the model over {band}, inside the limit of {K_SIGMA:g} σ")
  else:
    head = (f"{name}: DISAGREES (fail) — held-out Allan deviation {h['max_dev_sigma']:.1f} σ from "
            f"the model at τ {h['tau_max_dev_s']:.3g} s, beyond the limit of {K_SIGMA:g} σ over "
            f"{band}")
  head += (f"; at most {100 * h['rel_max']:.0f} % off there "
           f"({100 * h['rel_max_resolved']:.0f} % up to τ {h['tau_resolved_s']:.3g} s, where the "
           f"estimator's scatter is ≤ {100 * REL_RESOLVED / 3:.1f} %)")
  if h['within']:
    return head
  return head + '; ' + '; '.join(findings or ['no single feature stands out']) + (
      f'; likely cause: {cause}' if cause else '')
