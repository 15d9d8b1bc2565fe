"""The figures of fit-profile (Allan deviation, timing)."""

from __future__ import annotations



from fibril_mjx.analysis import plotting


# ---------------------------------------------------------------------------- plots


def plot_allan(fig_dir, ch, rows):
  """Allan deviation per axis of channel `ch`: fitting logs, held-out logs and the fitted
  model (`rows`: per axis `(name, (taus, adev, rel), held-out curve)`); returns the path."""
  plt = plotting.pyplot()
  fig, ax = plt.subplots(figsize=(7, 5))
  for (axname, (taus, adev, rel), (ht, hadev, hmodel, hrel)), c in zip(
      rows, ('tab:red', 'tab:green', 'tab:blue')):
    ax.loglog(taus, adev, '.', color=c, label=f'{axname} fitting logs')
    ax.loglog(ht, hadev, 'x', color=c, ms=4, label=f'{axname} held-out logs')
    ax.loglog(ht, hmodel, '-', color=c, lw=0.8, label=f'{axname} fitted model')
  ax.set_xlabel('τ [s]')
  ax.set_ylabel('Allan deviation')
  ax.grid(True, which='both', alpha=0.3)
  ax.legend(fontsize=6)
  ax.set_title(f'{ch}: Allan deviation, fitted model and held-out logs')
  path = fig_dir / f'fit_allan_{ch}.png'
  return plotting.save(fig, path)


def plot_timing(fig_dir, t):
  """Histograms of the recorded sample periods and latencies (`t`: `fit_timing`'s result);
  returns the path."""
  plt = plotting.pyplot()
  fig, axes = plt.subplots(1, 2, figsize=(10, 4))
  axes[0].hist(t['periods'] * 1e3, bins=50)
  axes[0].set_xlabel('sample period [ms]')
  axes[1].hist(t['latencies'] * 1e3, bins=50)
  axes[1].set_xlabel('latency arrival − sample [ms]')
  path = fig_dir / 'fit_timing.png'
  return plotting.save(fig, path)
