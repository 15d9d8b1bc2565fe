"""The documentation's generated reference (tools/gen_docs_reference.py) covers what the code
has — every CLI command and option, every registered component type, every file-format field —
and its examples are valid command lines; the HTML link checker (tools/check_docs_links.py)
finds broken links. The site build itself (`make docs`, in CI) generates these pages."""

from __future__ import annotations

import argparse
import pathlib
import shlex
import sys

import pytest

TOOLS = pathlib.Path(__file__).resolve().parents[2] / 'tools'
sys.path.insert(0, str(TOOLS))
import check_docs_links  # noqa: E402
import gen_docs_reference as gen  # noqa: E402


@pytest.fixture(scope='module')
def pages():
  return gen.pages()


def test_every_command_and_option_is_documented_with_a_valid_example(pages):
  parser = gen.cli_parser()
  subs = gen.subcommands(parser)
  assert {'run', 'plan', 'campaign', 'tune', 'validate', 'fit-profile'} <= set(subs)
  missing = sorted(set(subs) - set(gen.EXAMPLES))
  assert not missing, f'commands without an example in tools/gen_docs_reference.py: {missing}'
  page = pages['reference/cli.md']
  for name, sub in subs.items():
    assert f'## fibril-mjx {name}\n' in page
    for action in sub._actions:
      for opt in action.option_strings:
        if opt not in ('-h', '--help'):
          assert f'`{opt}' in page, (name, opt)
    # the example is a command line the parser accepts
    argv = shlex.split(gen.EXAMPLES[name])
    assert argv[0] == 'fibril-mjx'
    args = parser.parse_args(argv[1:])
    assert args.command == name


def test_every_component_type_has_a_page_with_every_field(pages):
  from fibril_mjx.core import registry
  from fibril_mjx.workflows import schema
  from fibril_mjx import components
  registry.discover(components)
  models = schema.component_config_models()
  assert set(gen.component_types()) == set(models) and len(models) >= 10
  index = pages['reference/components/index.md']
  for t, model in models.items():
    page = pages[gen.component_file(t)]
    assert page.startswith(f'# `{t}`')
    assert f'[`{t}`]' in index
    for field in model.model_fields:
      if field != 'profiles':
        assert f'| `{field}` |' in page, (t, field)


def test_every_part_the_registry_holds_is_on_the_type_page(pages):
  """Each type's page lists every registry part (`registry.PARTS`, whatever layer registered
  it), with the module that registered it or its value, and — where the type has none."""
  registry = gen._registry()
  for t in gen.component_types():
    page, entry = pages[gen.component_file(t)], registry.get(t)
    for part in registry.PARTS:
      assert f'| `{part}` | ' in page, (t, part)
      assert (f'| `{part}` | — |' in page) == (getattr(entry, part) is None), (t, part)
  motor = pages[gen.component_file('fibril_sim/motor')]
  assert '| `assembly_channels` | `["actuator"]` |' in motor
  imu = pages[gen.component_file('fibril_sim/imu')]
  for row in ('| `validation_rig` | `fibril_mjx.workflows.validate.inertial.driver` |',
              '| `profile_fit` | `fibril_mjx.workflows.fit_profile.driver` |',
              '| `mavlink` | `"imu"` |', '| `ros` | `fibril_mjx.io.ros_messages` |'):
    assert row in imu, row
  assert '| `bag` | for `sensor_msgs/msg/FluidPressure` |' in pages[
      gen.component_file('fibril_sim/airspeed')]
  index = pages['reference/components/index.md']
  assert all(f'`{part}`' in index for part in registry.PARTS)


def test_profiles_are_listed_with_their_types(pages):
  cat = gen._catalog()
  page = pages['reference/profiles.md']
  for p in cat.profiles.values():
    assert f'| `{p.id}` | {p.kind} |' in page
    for t in p.component_types:
      assert f'## Built-in profiles' in pages[gen.component_file(t)]
      assert f'### `{p.id}` ({p.kind})' in pages[gen.component_file(t)]


def test_every_file_format_field_is_documented(pages):
  from fibril_mjx.workflows import schema
  for kind, rel in (('campaign', 'reference/campaign.md'), ('tune', 'reference/tune.md'),
                    ('manifest', 'reference/manifest.md')):
    s = schema.manifest_schema() if kind == 'manifest' else schema.file_schema(kind)
    page = pages[rel]
    for field in s['properties']:
      assert f'| `{field}` |' in page, (kind, field)
    for name, d in s.get('$defs', {}).items():
      if kind == 'manifest' and name.startswith(('fibril_sim_', 'fibril_mjx_')):
        continue   # component configs: on the component pages
      assert f'\n## {name}\n' in page, (kind, name)
      for field in d.get('properties', {}):
        assert f'| `{field}` |' in page, (kind, name, field)


@pytest.mark.parametrize('name, unit', [
    ('period_s', 's'), ('bandwidth_hz', 'Hz'), ('lever_arm_m', 'm'),
    ('accel_noise_stddev_m_s2', 'm/s²'), ('initial_gyro_bias_rad_s', 'rad/s'),
    ('angular_velocity_noise_density', 'rad/s/√Hz'),
    ('linear_acceleration_random_walk', 'm/s²/√s'), ('estimator', '')])
def test_units_read_off_field_names(name, unit):
  assert gen.unit_of(name) == unit


def test_link_checker_finds_broken_links(tmp_path):
  (tmp_path / 'a').mkdir()
  (tmp_path / 'index.html').write_text(
      '<h2 id="top">x</h2><a href="a/page.html#sec">ok</a><a href="#top">ok</a>'
      '<a href="https://example.org/x">external</a><img src="img/missing.png">')
  (tmp_path / 'a' / 'page.html').write_text(
      '<h2 id="sec">s</h2><a href="../index.html#nope">bad anchor</a>'
      '<a href="../index.html">ok</a>')
  problems = check_docs_links.check(tmp_path)
  assert problems == [
      "a/page.html: <a> ../index.html#nope: no id 'nope' in index.html",
      'index.html: <img> img/missing.png: no such file in the site'], problems
