"""The exit codes the docs promise are the CLI's: the table in `docs/getting-started.md`
("Exit status") is parsed, every row has a scenario here that drives `fibril_mjx.cli.main` to
that outcome (the work behind a command replaced by a stub where the real one takes minutes),
and every scenario has a row; the prose of the guides that quotes a code agrees with the table.
"""

from __future__ import annotations

import pathlib
import re
import signal
import types

import pytest

from fibril_mjx import cli
from fibril_mjx.batch.worlds import WorldsStalled
from fibril_mjx.workflows import stopping

DOCS = pathlib.Path(__file__).resolve().parents[2] / 'docs'
MANIFEST = pathlib.Path(__file__).resolve().parents[2] / 'manifests' / 'imu_ekf.yaml'


def doc_table() -> set[tuple[str, int]]:
  """`{(command, status)}` of the "Exit status" table of getting-started.md."""
  text = (DOCS / 'getting-started.md').read_text()
  section = text.split('### Exit status', 1)[1]
  rows = set()
  for line in section.splitlines()[1:]:
    if line.startswith('| command') or line.startswith('| ---'):
      continue
    if not line.startswith('|'):
      if rows:
        break
      continue
    cells = [c.strip() for c in line.strip('|').split('|')]
    rows.add((cells[0].replace('`', ''), int(cells[1])))
  return rows


def _ok(monkeypatch, tmp_path):
  code = cli.main(['schema', '--out', str(tmp_path / 'schema.json')])
  assert (tmp_path / 'schema.json').read_text().startswith('{')
  return code


def _bad_input(monkeypatch, tmp_path):
  code = cli.main(['plan', str(tmp_path / 'missing.yaml')])
  with pytest.raises(SystemExit) as e:         # a command line the parser refuses
    cli.main(['run', str(MANIFEST), '--physics', 'nope', '--out', str(tmp_path / 'o')])
  assert e.value.code == code
  return code


def _interrupted(monkeypatch, tmp_path):
  def stop(args):
    raise KeyboardInterrupt
  monkeypatch.setattr(cli, '_cmd_plan', stop)
  return cli.main(['plan', str(MANIFEST)])


def _validate_failed(monkeypatch, tmp_path):
  monkeypatch.setattr(cli.validate, 'run', lambda *a, **k: {'passed': False})
  monkeypatch.setattr(cli.validate, 'render', lambda s: 'FAIL  x\n')
  return cli.main(['validate', str(MANIFEST), '--component', 'imu', '--out',
                   str(tmp_path / 'o')])


def _fit_disagrees(monkeypatch, tmp_path):
  axis = {'name': 'gyro x', 'agrees': False, 'console': 'gyro x: DISAGREES (fail)'}
  monkeypatch.setattr(cli.fit_profile, 'fit_profile',
                      lambda **k: {'fields': {}, 'verdict': [axis], 'heldout_rule': 'r'})
  return cli.main(['fit-profile', '--type', 'fibril_sim/imu', '--component', 'imu',
                   '--static', 'x.npz', '--out', str(tmp_path / 'p.yaml')])


def _run_stalled(monkeypatch, tmp_path):
  def stall(*a, **k):
    raise WorldsStalled('stalled')

  def leave(code):
    raise SystemExit(code)
  monkeypatch.setattr(cli.runner, 'run', stall)
  monkeypatch.setattr(cli.os, '_exit', leave)
  with pytest.raises(SystemExit) as e:
    cli.main(['run', str(MANIFEST), '--out', str(tmp_path / 'o')])
  return e.value.code


def _sigterm(monkeypatch, tmp_path):
  def stop(*a, **k):
    raise stopping.Stopped(signal.SIGTERM, 'stopped by SIGTERM: nothing kept')
  monkeypatch.setattr(cli.runner, 'run', stop)
  return cli.main(['run', str(MANIFEST), '--out', str(tmp_path / 'o')])


def _tune_did_not_move(monkeypatch, tmp_path):
  res = types.SimpleNamespace(moved=False, stop='xtol', advice='widen the bounds')
  monkeypatch.setattr(cli.tune, 'run_cli', lambda *a, **k: res)
  monkeypatch.setattr(cli.tune, 'render_report', lambda r: 'report\n')
  return cli.main(['tune', 'x.yaml', '--out', str(tmp_path / 'o')])


SCENARIOS = {('run, campaign', 143): _sigterm, ('tune', 1): _tune_did_not_move,
             ('every command', 0): _ok, ('every command', 2): _bad_input,
             ('every command', 130): _interrupted, ('validate', 1): _validate_failed,
             ('fit-profile', 3): _fit_disagrees, ('run', 3): _run_stalled}


def test_the_docs_table_has_exactly_the_tested_rows():
  assert doc_table() == set(SCENARIOS)


@pytest.mark.parametrize('row', sorted(SCENARIOS), ids=lambda r: f'{r[0]}-{r[1]}')
def test_each_documented_exit_code_is_the_clis(row, monkeypatch, tmp_path):
  assert SCENARIOS[row](monkeypatch, tmp_path) == row[1]


def test_the_guides_quote_the_table():
  """Each "exit status N when/…" of the fit-profile tutorial and the validate guide is a row."""
  codes = {s for _, s in doc_table()}
  tut = (DOCS / 'tutorials' / 'fit-profile.md').read_text()
  assert 'The exit status is 3 when\nany axis disagrees (2 when it cannot run' in tut
  guide = (DOCS / 'guides' / 'validate-fit.md').read_text()
  assert 'Exit status 0 all passed, 1 a check\nfailed, 2 bad input' in guide
  for text in (tut, guide):
    for n in re.findall(r'[Ee]xit(?:s| status(?: is)?) (\d+)', text):
      assert int(n) in codes, n
