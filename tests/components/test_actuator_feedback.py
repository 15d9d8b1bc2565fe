"""Actuator feedback through the one sensing cycle (`mechanisms/sensing.py`, SPEC §4): the
motor types' feedback transport loses samples with `feedback_loss_probability` and delays them
with `feedback_jitter_s` as a sensor's transport does.

References: the binomial law of the delivered count (the losses are independent Bernoulli
draws, one per acquisition), and a component without jitter in the same run.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import fibril_mjx
from actuator_rig import DT, motion, motor, write

PERIOD = 0.004      # feedback every 2 ticks
TICKS = 400
WORLDS = 6
P_LOSS = 0.3
LAT, JIT = 0.004, 0.002
LOSSY = ('motor', 'motion_motor', 'position_servo')


@pytest.fixture(scope='module')
def result(tmp_path_factory):
  """One run: the three motor types with feedback loss, and two motors with a 4 ms feedback
  latency, one of them jittered."""
  fb = dict(feedback_period_s=PERIOD)
  comps = [motor('motor', 'a_vel', feedback_loss_probability=P_LOSS, **fb),
           motion('motion_motor', feedback_loss_probability=P_LOSS, **fb),
           {'id': 'position_servo', 'type': 'fibril_sim/position_servo',
            'config': {'actuator': 'a_eff', 'application_period_s': DT,
                       'feedback_loss_probability': P_LOSS, **fb}},
           motor('plain', 'a_pos', feedback_latency_s=LAT, **fb),
           motor('jittered', 'a_sc', feedback_latency_s=LAT, feedback_jitter_s=JIT, **fb)]
  sim = fibril_mjx.load(write(tmp_path_factory.mktemp('fb'), comps))
  final, tr, _ = sim.rollout(sim.default_params(WORLDS), fibril_mjx.world_keys(11, WORLDS),
                             TICKS)
  status = {c: sim.components[c].status(final.components[c]) for c in sim.components}
  return status, tr['sensor']


@pytest.mark.parametrize('kind', LOSSY)
def test_delivered_feedback_count_is_binomial(result, kind):
  """Without latency every acquisition (every 2 ticks, tick 0 included: n of them) is
  delivered at its own tick unless lost: delivered ~ Binomial(n, 1 − p), delivered + lost = n."""
  status, sensor = result
  n = WORLDS * (TICKS // 2 + 1)
  delivered = int(np.asarray(sensor[kind].new_data).sum())
  lost = np.asarray(status[kind]['feedback_lost'])
  assert delivered + int(lost.sum()) == n
  sd = math.sqrt(n * P_LOSS * (1 - P_LOSS))
  assert abs(delivered - n * (1 - P_LOSS)) < 4 * sd, (delivered, n)
  assert len(set(lost.tolist())) > 1                     # a stream per world


def test_feedback_jitter_moves_arrivals_not_stamps(result):
  """`feedback_latency_s` 4 ms ± `feedback_jitter_s` 2 ms: the sample ticks are the acquisition
  instants of the unjittered motor; the arrival delay stays within [0, ⌈(latency + 6σ)/dt⌉]
  ticks, is not always the nominal 2 ticks, and the delivered sequence never goes back."""
  _, sensor = result
  plain, jittered = sensor['plain'], sensor['jittered']
  new_p, new_j = (np.asarray(t.new_data) for t in (plain, jittered))
  delay_p = (np.asarray(plain.arrival_tick) - np.asarray(plain.sample_tick))[new_p]
  delay_j = (np.asarray(jittered.arrival_tick) - np.asarray(jittered.sample_tick))[new_j]
  assert set(delay_p.tolist()) == {round(LAT / DT)}
  assert delay_j.min() >= 0 and delay_j.max() <= math.ceil((LAT + 6 * JIT) / DT)
  assert len(set(delay_j.tolist())) > 2
  stamps = set(np.asarray(plain.sample_tick)[new_p].tolist())
  assert set(np.asarray(jittered.sample_tick)[new_j].tolist()) <= stamps
  seq = np.asarray(jittered.sequence)
  for w in range(WORLDS):
    assert np.all(np.diff(seq[w][new_j[w]]) > 0)
