"""Campaigns whose controller is a trained policy (`controller:`,
`fibril_mjx.workflows.campaign.policy`): the closed loop against a float64 NumPy forward pass
of the checkpoint's network on the replayed trace (timing, observation layout, action scaling,
return and tracking metrics), bitwise replay, the physics choice, and every validation rule by
its message.

The checkpoint is an untrained Brax PPO network (`policy.init_params`) with a non-trivial
observation normalizer, so no training runs here (`tests/rl/test_policy_robustness.py` trains).
"""

from __future__ import annotations

import hashlib
import json
import pathlib

import numpy as np
import pytest
import yaml

pytest.importorskip('brax')

from fibril_mjx.errors import ConfigError, ConfigErrors, FibrilError  # noqa: E402
from fibril_mjx.workflows import replay as replay_mod  # noqa: E402
from fibril_mjx.workflows.campaign import engine, execute, spec  # noqa: E402
from fibril_mjx.workflows.campaign import policy as policy_io  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
MANIFEST = REPO / 'manifests' / 'rl' / 'leg_hold.yaml'
OBSERVE = {'hip': ['position', 'velocity', 'applied_effort'],
           'imu': ['angular_velocity', 'linear_acceleration']}
SCALE = 3.0
P = 5                      # control ticks (5 ms at dt = 1 ms)
TICKS = 50
META = {'observation_size': 12, 'action_size': 1,
        'network': {'hidden': [8], 'activation': 'swish', 'normalize_observations': True,
                    'distribution': 'tanh_normal'}, 'env': {}, 'training': {}}


def controller(policy, **changes):
  c = {'policy': str(policy), 'task': 'leg_hold', 'observe': OBSERVE,
       'actions': [{'component': 'hip', 'mode': 'effort', 'scale': SCALE}],
       'control_period_s': 0.005, 'goal': {'dist': 'uniform', 'low': -0.5, 'high': 0.5}}
  c.update(changes)
  return c


def write(tmp: pathlib.Path, name: str, ctl=None, **top) -> pathlib.Path:
  doc = {'fibril_campaign': 1, 'manifest': str(MANIFEST), 'worlds': 4, 'seed': 3,
         'duration_s': TICKS * 1e-3, 'chunk_worlds': 4, 'controller': ctl,
         'vary': {'hip.feedback_latency_s': {'dist': 'uniform', 'low': 0.0, 'high': 0.004},
                  'imu.angular_velocity_bias': {'dist': 'normal', 'mean': 0.0,
                                                'std': [0.01, 0.01, 0.01]}},
         'criteria': {'hold': {'metric': 'policy.settled_error_max', 'max': 0.05}}}
  doc.update(top)
  if ctl is None:
    doc.pop('controller')
  path = tmp / f'{name}.yaml'
  path.write_text(yaml.safe_dump(doc, sort_keys=False))
  return path


@pytest.fixture(scope='module')
def tmp(tmp_path_factory):
  return tmp_path_factory.mktemp('policy_campaign')


@pytest.fixture(scope='module')
def ckpt(tmp):
  norm, pol = policy_io.init_params(META, seed=3)
  n = META['observation_size']
  norm = norm.replace(mean=np.linspace(-0.2, 0.3, n).astype(np.float32),
                      std=np.linspace(0.5, 2.0, n).astype(np.float32))
  return policy_io.save(tmp / 'ckpt', (norm, pol), META)


@pytest.fixture(scope='module')
def ran(tmp, ckpt):
  """A 4-world campaign and world 2's replay."""
  path = write(tmp, 'closed', controller(ckpt))
  meta = execute.run(path, tmp / 'out', progress=False, report=False)
  rows = execute.read_rows(tmp / 'out')
  res = replay_mod.replay(tmp / 'out', 2, tmp / 'replay2')
  trace = dict(np.load(tmp / 'replay2' / 'trace.npz'))
  return meta, rows, res, trace


def numpy_policy(ckpt):
  """The checkpoint's deterministic action in float64: normalize, Dense + swish, tanh(loc)."""
  import flax.serialization
  state = flax.serialization.msgpack_restore(pathlib.Path(ckpt).read_bytes())
  mean, std = (np.asarray(state['0'][k], np.float64) for k in ('mean', 'std'))
  layers = state['1']['params']
  names = sorted(layers, key=lambda k: int(k.split('_')[1]))

  def act(obs):
    h = (np.asarray(obs, np.float64) - mean) / std
    for i, name in enumerate(names):
      h = h @ np.asarray(layers[name]['kernel'], np.float64) + np.asarray(
          layers[name]['bias'], np.float64)
      if i < len(names) - 1:
        h = h / (1.0 + np.exp(-h))          # swish
    return np.tanh(h[:META['action_size']])
  return act


def test_closed_loop_equals_a_numpy_policy_on_the_replayed_trace(ran, ckpt):
  _, _, res, tr = ran
  goal = res['sampled']['controller.goal']
  act = numpy_policy(ckpt)
  pos = tr['truth/hip/position'][0].astype(np.float64)
  setpoint = tr['truth/hip/setpoint'][0].astype(np.float64)
  actions, ret, err2, errs = [], 0.0, 0.0, []
  for k in range(1, TICKS // P + 1):
    t = k * P - 1                                  # observed tick; commands issued at t + 1
    obs = np.concatenate([
        [tr[f'sensor/hip/{f}'][0, t] for f in OBSERVE['hip']], [tr['sensor/hip/new_data'][0, t]],
        *[tr[f'sensor/imu/{f}'][0, t] for f in OBSERVE['imu']], [tr['sensor/imu/new_data'][0, t]],
        [goal]]).astype(np.float64)
    if k >= 2:                                     # the step of action k - 1 is scored here
      e = pos[t] - goal
      ret += -e ** 2 - 0.01 * actions[-1] ** 2
      err2 += e ** 2
      errs.append(abs(e))
    a = float(act(obs)[0])
    actions.append(a)
    if t + 1 <= TICKS:
      # the effort command of this action is the hip's setpoint from the next tick on
      np.testing.assert_allclose(setpoint[t + 1:t + 1 + P], SCALE * a, rtol=1e-5, atol=1e-6)
  assert len({round(a, 3) for a in actions}) > 3   # the policy does act on what it sees
  m = res['metrics']
  n = len(errs)
  assert m['policy.episode_return'] == pytest.approx(ret, rel=1e-5)
  assert m['policy.tracking_error_rms'] == pytest.approx(np.sqrt(err2 / n), rel=1e-5)
  settled = max(errs[n - max(1, n // 4):])
  assert m['policy.settled_error_max'] == pytest.approx(settled, rel=1e-5)
  assert m['policy.success'] == float(settled < policy_io.TASKS['leg_hold'].success_tol)
  assert m['pass'] == (settled <= 0.05)


def test_replay_reproduces_the_campaign_row_bitwise(ran):
  _, rows, res, tr = ran
  assert res['equal_to_campaign_row'] is True
  for k in ('policy.episode_return', 'policy.tracking_error_rms', 'policy.settled_error_max'):
    assert np.float64(res['metrics'][k]).tobytes() == np.float64(rows[k][2]).tobytes()
  assert tr['truth/hip/position'].shape == (1, TICKS + 1)   # the full trace, tick 0 first
  # each world its own goal (sampled per world), and different worlds behave differently
  assert len(set(rows['controller.goal'].tolist())) == 4
  assert len(set(rows['policy.episode_return'].tolist())) == 4


def test_auto_physics_runs_mjx_and_says_why(ran, ckpt):
  meta, *_ = ran
  assert meta['options']['physics'] == 'mjx'
  assert meta['physics_choice'] == ('auto: MJX in the loop, because a controller closes the '
                                    'loop on delivered samples')
  # the checkpoint is part of what the results depend on (resume and replay check it)
  assert meta['hashes']['policy'] == hashlib.sha256(pathlib.Path(ckpt).read_bytes()).hexdigest()


def test_physics_c_is_refused_with_a_controller(tmp, ckpt):
  path = write(tmp, 'phys_c', controller(ckpt), physics='c')
  with pytest.raises(FibrilError, match=r"physics 'c' runs the physics open loop .*but a "
                     r"controller closes the loop on delivered samples"):
    engine.Plan(spec.read(path))


# ------------------------------------------------------------------------------- validation

def one_error(path, **kw) -> str:
  with pytest.raises(ConfigErrors) as e:
    spec.read(path, **kw)
  assert len(e.value.errors) == 1, str(e.value)
  return str(e.value.errors[0])


def test_unknown_task(tmp, ckpt):
  path = write(tmp, 'task', controller(ckpt, task='leg_holdd'))
  assert one_error(path) == (f"{path}: controller.task = 'leg_holdd': unknown task; "
                             "expected leg_hold")


def test_missing_policy_file(tmp):
  path = write(tmp, 'missing', controller('nowhere/policy.msgpack'))
  msg = one_error(path)
  assert msg.startswith(f"{path}: controller.policy = 'nowhere/policy.msgpack': file not found")


def test_missing_policy_file_given_on_the_command_line(tmp, ckpt):
  path = write(tmp, 'missing_cli', controller(ckpt))
  assert 'controller.policy' in one_error(path, policy=tmp / 'no.msgpack')
  with pytest.raises(ConfigErrors, match='--policy needs a controller: section'):
    spec.read(write(tmp, 'no_ctl', None), policy=ckpt)


def test_missing_controller_key(tmp, ckpt):
  c = controller(ckpt)
  del c['control_period_s']
  path = write(tmp, 'nokey', c)
  assert one_error(path).endswith('controller.control_period_s: required: the policy period '
                                  'the policy was trained with')


def test_bad_action_scale_and_unknown_key(tmp, ckpt):
  path = write(tmp, 'scale', controller(ckpt, actions=[{'component': 'hip', 'mode': 'effort',
                                                          'scale': 0}]))
  assert one_error(path) == (f'{path}: controller.actions[0].scale = 0: must be a number > 0 '
                             '(command units per unit action)')
  path = write(tmp, 'key', controller(ckpt, polcy='x'))
  assert "controller.polcy" in one_error(path) and 'did you mean' in one_error(path)


def plan_error(path) -> str:
  with pytest.raises(ConfigError) as e:
    engine.Plan(spec.read(path))
  return str(e.value)


def test_wrong_observation_shape(tmp, ckpt):
  obs = {'hip': ['position', 'velocity'], 'imu': ['angular_velocity', 'linear_acceleration']}
  path = write(tmp, 'shape', controller(ckpt, observe=obs))
  assert plan_error(path) == (
      f"{path}: controller = '{ckpt}': the policy takes 12 observations and gives 1 actions; "
      "the controller's observe / actions give 11 and 1")


def test_unknown_mode_component_and_period(tmp, ckpt):
  path = write(tmp, 'mode', controller(ckpt, actions=[{'component': 'hip', 'mode': 'torque',
                                                         'scale': 1.0}]))
  assert plan_error(path).startswith(f"{path}: controller.actions[0].mode = 'torque': 'hip' "
                                     "(fibril_sim/motor) accepts ")
  path = write(tmp, 'comp', controller(ckpt, actions=[{'component': 'imu', 'mode': 'effort',
                                                         'scale': 1.0}]))
  assert plan_error(path).startswith(f"{path}: controller.actions[0].component = 'imu': no "
                                     "actuator component of that id")
  path = write(tmp, 'period', controller(ckpt, control_period_s=0.0025))
  assert plan_error(path) == (f'{path}: controller.control_period_s = 0.0025: must be a whole '
                              'number of physics ticks (dt = 0.001 s)')


def test_checkpoint_whose_arrays_do_not_fit_its_network(tmp, ckpt):
  bad = tmp / 'bad'
  bad.mkdir()
  (bad / 'policy.msgpack').write_bytes(pathlib.Path(ckpt).read_bytes())
  (bad / 'policy.json').write_text(json.dumps({'format': policy_io.FORMAT,
                                               **{**META, 'observation_size': 13}}))
  with pytest.raises(ConfigError, match=r"controller.policy = '.*bad/policy.msgpack': array "
                     r"shapes differ from the network of policy.json \(observation_size 13"):
    policy_io.load(bad / 'policy.msgpack')
  (bad / 'policy.json').unlink()
  with pytest.raises(ConfigError, match='no policy.json beside the checkpoint'):
    policy_io.load(bad / 'policy.msgpack')
