"""`bench/kernels.py`'s summary of component kernel sizes (host arithmetic, no JAX run)."""

import pathlib
import re
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / 'bench'))
import kernels  # noqa: E402


def numbers(line):
  """(launches per tick, us, median launch us, small launches, their us) of a summary line."""
  m = re.search(r': (\S+) per tick, (\S+) us; median launch (\S+) us; (\S+) launches under 10 us '
                r'take (\S+) us per tick$', line)
  return tuple(float(x) for x in m.groups())


def test_size_summary_weights_the_median_by_launches():
  # 10 launches of 2 us, 1 of 100 us, 4 of 20 us per tick: 15 launches, 20 + 100 + 80 = 200 us;
  # the launch-weighted median is 2 us (an unweighted one over the three kernels would be 20)
  line = kernels.size_summary([(100.0, 1.0), (20.0, 4.0), (2.0, 10.0)])
  per_tick, total, median, small, small_us = numbers(line)
  assert (per_tick, total, median) == (15, 200, 2.0)
  assert (small, small_us) == (10, 20)


def test_size_summary_median_at_an_even_split():
  # two kernels with as many launches each: the first whose running count reaches half
  line = kernels.size_summary([(5.0, 3.0), (50.0, 3.0)])
  assert numbers(line)[2] == 5.0


def test_size_summary_without_component_kernels():
  assert kernels.size_summary([]).endswith(': none')
