"""What the tuning docs say about `tune` is what the code does: the fittable MJCF attributes
(the guide's and the tutorial's lists against `params.FITTABLE_MJCF`, and each one resolved
or refused as listed), and the report's gradients label (multiple shooting only with
`windows:`)."""

from __future__ import annotations

import pathlib
import re
import types

import pytest

from fibril_mjx.workflows.tune import params, report

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _listed(path):
  """`{(element, attribute)}` of the backticked `ELEMENT:NAME.a|b` forms in the paragraph that
  lists the MJCF fields; a `dcmotor`'s follow the words 'for a `dcmotor`'."""
  text = ' '.join(pathlib.Path(path).read_text().split())
  start = text.index('MJCF fields `joint:NAME.')
  para = text[start:text.index('`bounds` are required', start)]
  plain, _, dc = para.partition('for a `dcmotor`')
  out = set()
  for part, kind in ((plain, None), (dc, 'dcmotor')):
    for element, attrs in re.findall(r'`(\w+):NAME\.([\w\[\]|]+)`', part):
      out |= {(kind or element, a) for a in attrs.split('|')}
  return out


@pytest.mark.parametrize('doc', ['docs/guides/tuning.md', 'docs/tutorials/tune.md'])
def test_the_docs_list_every_fittable_mjcf_attribute(doc):
  code = {(e, a) for e, attrs in params.FITTABLE_MJCF.items() for a in attrs}
  assert _listed(ROOT / doc) == code


def test_the_joint_list_follows_the_model_fields():
  """`ref` and every joint field `physics.mjcf_fields` can locate are fittable."""
  from fibril_mjx.physics import mjcf_fields
  joint = {a for e, a in mjcf_fields.MODEL_FIELDS if e == 'joint'} | {'ref'}
  assert set(params.FITTABLE_MJCF['joint']) == joint


def _prob(window_s):
  spec = types.SimpleNamespace(window_s=window_s)
  return types.SimpleNamespace(gradients='exact', spec=spec, L=1205, dt=0.005)


def test_the_gradients_label_says_multiple_shooting_only_with_windows():
  single = report._gradients(_prob(None))
  assert 'single shooting' in single and 'multiple shooting' not in single, single
  assert 'multiple shooting 6.025 s windows' in report._gradients(_prob(6.0))
