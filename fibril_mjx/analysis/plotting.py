"""The one matplotlib setup of the package: every plot (analyses, run, campaign, validate,
fit-profile, tune) gets `pyplot` from here.

Why one place: the backend must be chosen before `matplotlib.pyplot` is first imported, and
the package draws only into files, often on machines without a display (clusters, CI), so it
is the non-interactive `Agg` every time. matplotlib is imported on the first plot, not when
the package is imported: most runs draw nothing, and matplotlib takes a while to load.
"""

from __future__ import annotations

BACKEND = 'Agg'


def pyplot():
  """`matplotlib.pyplot` with the file-only `Agg` backend selected."""
  import matplotlib
  matplotlib.use(BACKEND)
  import matplotlib.pyplot as plt
  return plt


def save(fig, path, dpi: int = 100) -> str:
  """Lays out, writes and closes `fig` (closing frees it: runs draw hundreds); returns the
  file's name (what summaries list)."""
  fig.tight_layout()
  fig.savefig(path, dpi=dpi)
  pyplot().close(fig)
  return path.name
