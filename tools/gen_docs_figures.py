"""Runs every tutorial of docs/tutorials/ at its full (default) size and copies the figure it
makes to docs/img/tutorials/<name>.png, the image its page shows.

    .venv/bin/python tools/gen_docs_figures.py [NAME ...]     # default: every tutorial

The test suite runs the same scripts at a small size (tests/examples/); this is for refreshing
the committed figures after a change to a tutorial or to what it shows.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
# name: (script argv after the interpreter, the figure it writes)
TUTORIALS = {
    'imu_ahrs': (['examples/tutorial_imu_ahrs.py', '--out', 'out/tutorials/imu_ahrs'],
                 'out/tutorials/imu_ahrs/figure.png'),
    'fit_profile': (['examples/tutorial_fit_profile.py', '--out', 'out/tutorials/fit_profile'],
                    'out/tutorials/fit_profile/figure.png'),
    'campaign': (['examples/tutorial_campaign.py', '--out', 'out/tutorials/campaign'],
                 'out/tutorials/campaign/figure.png'),
    'tune': (['examples/tutorial_tune.py', '--out', 'out/tutorials/tune'],
             'out/tutorials/tune/figure.png'),
    'train_policy': (['examples/train_ppo.py', '--device-randomization', '--timesteps',
                      '100000', '--evals', '5', '--out', 'out/tutorials/train_policy'],
                     'out/tutorials/train_policy/learning_curve.png'),
    'export': (['examples/tutorial_export.py', '--out', 'out/tutorials/export'],
               'out/tutorials/export/figure.png'),
}


def main(argv=None) -> int:
  names = (argv if argv is not None else sys.argv[1:]) or list(TUTORIALS)
  dest = ROOT / 'docs' / 'img' / 'tutorials'
  dest.mkdir(parents=True, exist_ok=True)
  for name in names:
    args, figure = TUTORIALS[name]
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *args], cwd=ROOT, check=True)
    shutil.copy(ROOT / figure, dest / f'{name}.png')
    print(f'{name}: {time.perf_counter() - t0:.0f} s -> {dest / (name + ".png")}', flush=True)
  return 0


if __name__ == '__main__':
  sys.exit(main())
