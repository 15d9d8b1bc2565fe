"""Monte Carlo robustness campaigns (SPEC §10): a campaign file (`fibril_campaign: 1`) names a
manifest, per-world distributions over component fields, transport latencies, MJCF physical
fields and initial-state offsets, metrics and pass/fail criteria; `run` executes it in
deterministic chunks (locally or as Ray tasks) into resumable Parquet parts plus a report.
A paired campaign (`designs:`) runs its designs on the same worlds and reports their paired
differences and the variance reduction against independent keys (`paired.py`).

    from fibril_mjx.workflows import campaign
    campaign.run('manifests/campaigns/ahrs_robustness.yaml', 'out/mc',
                 campaign.Overrides(worlds=512))
    rows = campaign.read_rows('out/mc')          # {column: (nworld,)}, sorted by world
"""

from fibril_mjx.workflows.campaign.execute import read_rows, run
from fibril_mjx.workflows.campaign.spec import Overrides
from fibril_mjx.workflows.campaign.spec import read as read_campaign

__all__ = ['Overrides', 'run', 'read_rows', 'read_campaign']
