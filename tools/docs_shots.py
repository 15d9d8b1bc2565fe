"""Renders pages of the built documentation site with headless Chromium to PNG, to check the
site as a person sees it (`make docs-shots`, after `make docs`).

    .venv/bin/python tools/docs_shots.py [--site out/site] [--out out/docs-shots]

Needs Debian's `chromium` package (`apt-get install -y chromium`); a missing browser is a
one-line error. Writes one PNG per page in `PAGES`.
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import subprocess
import sys
import tempfile

# page of the site -> (PNG name, window height in px)
PAGES = {
    'index.html': ('home.png', 1600),
    'tutorials/imu-ahrs.html': ('tutorial_imu_ahrs.png', 2400),
}
BROWSERS = ('chromium', 'chromium-browser', 'google-chrome')


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument('--site', default='out/site')
  ap.add_argument('--out', default='out/docs-shots')
  ap.add_argument('--width', type=int, default=1280)
  args = ap.parse_args(argv)
  browser = next((b for b in BROWSERS if shutil.which(b)), None)
  if browser is None:
    print('error: no headless Chromium found (Debian: apt-get install -y chromium)',
          file=sys.stderr)
    return 2
  site, out = pathlib.Path(args.site).resolve(), pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  for page, (name, height) in PAGES.items():
    src = site / page
    if not src.is_file():
      print(f'error: {src}: not built (run make docs)', file=sys.stderr)
      return 2
    png = (out / name).resolve()
    with tempfile.TemporaryDirectory() as profile:
      cmd = [browser, '--headless', '--no-sandbox', '--disable-gpu', '--hide-scrollbars',
             f'--user-data-dir={profile}', f'--window-size={args.width},{height}',
             f'--screenshot={png}', src.as_uri()]
      res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if res.returncode != 0 or not png.is_file():
      print(f'error: {browser} failed on {page}: {res.stderr.strip()[-400:]}', file=sys.stderr)
      return 1
    print(f'wrote {png} ({page})')
  return 0


if __name__ == '__main__':
  sys.exit(main())
