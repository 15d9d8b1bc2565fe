"""`fibril_sim/position_servo`: the firmware law, motor and friction against a float64 NumPy
model written here, its gradients against finite differences, the whole adapter under MJX
against MuJoCo C stepping the same law, and its configuration errors."""

from __future__ import annotations

import contextlib
import pathlib

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
import yaml

import fibril_mjx
from fibril_mjx.components.actuators import position_servo as ps
from fibril_mjx.errors import FibrilError

ROOT = pathlib.Path(__file__).resolve().parents[2]
MANIFEST = ROOT / 'manifests' / 'tuning' / 'servo_xl330.yaml'
XML = ROOT / 'assets' / 'examples' / 'servo_pendulum_xl330.xml'

P = dict(error_gain=0.0029, supply_voltage_v=7.4, max_duty=0.95, torque_constant=0.38,
         resistance_ohm=3.4, torque_limit=0.5, friction_coulomb=0.01, friction_stribeck=0.02,
         stribeck_velocity=1.5, stribeck_exponent=1.3, friction_viscous=0.004,
         load_friction=0.06, load_friction_stribeck=0.07, feedback_current_per_force=0.0)


def reference(p, active, target, kp, kd, q, qd, tau_e, inertia, dt):
  """Float64 NumPy model of the servo (firmware P/PD → PWM → DC motor → limit; friction
  budget with Stribeck and load terms; stopping torque clipped to the budget)."""
  if not active:
    duty, tau_m = 0.0, 0.0
  else:
    u = p['error_gain'] * (kp * (target - q) - kd * qd)
    duty = max(-p['max_duty'], min(p['max_duty'], u))
    current = (duty * p['supply_voltage_v'] - p['torque_constant'] * qd) / p['resistance_ohm']
    tau_m = max(-p['torque_limit'], min(p['torque_limit'], p['torque_constant'] * current))
  stribeck = np.exp(-(abs(qd) / p['stribeck_velocity']) ** p['stribeck_exponent'])
  through = abs(tau_e - tau_m)
  budget = (p['friction_coulomb'] + p['friction_stribeck'] * stribeck
            + through * (p['load_friction'] + p['load_friction_stribeck'] * stribeck)
            + p['friction_viscous'] * abs(qd))
  stop = inertia * qd / dt + tau_m + tau_e
  tau_f = -stop if abs(stop) <= budget else -budget * np.sign(stop)
  return duty, tau_m, tau_f


@contextlib.contextmanager
def _x64():
  old = jax.config.jax_enable_x64
  jax.config.update('jax_enable_x64', True)
  try:
    yield
  finally:
    jax.config.update('jax_enable_x64', old)


def _params(dtype=jnp.float64, **kw):
  return ps.Params(**{k: jnp.asarray(v, dtype) for k, v in {**P, **kw}.items()})


def test_law_and_friction_match_numpy_reference():
  rng = np.random.default_rng(3)
  n = 400
  cases = dict(active=rng.random(n) < 0.85, target=rng.uniform(-1, 1, n),
               kp=rng.choice([0.0, 100.0, 400.0, 800.0], n), kd=rng.uniform(0, 50, n),
               q=rng.uniform(-1, 1, n), qd=rng.normal(0, 2, n), tau_e=rng.normal(0, 0.4, n),
               inertia=rng.uniform(0.004, 0.008, n))
  cases['qd'][:40] = 0.0                                  # at rest: the stiction branch
  cases['qd'][40:80] *= 1e-3                              # creeping
  with _x64():
    fn = jax.jit(jax.vmap(lambda a, t, kp, kd, q, qd, te, m: ps.servo_torques(
        _params(), a, ps.ServoCommand(True, True, t, kp, kd), ps.Joint(q, qd, te, m), 0.005)))
    got = fn(*(jnp.asarray(cases[k]) for k in ('active', 'target', 'kp', 'kd', 'q', 'qd',
                                                 'tau_e', 'inertia')))
  ref = np.array([reference(P, *(cases[k][i] for k in cases), 0.005) for i in range(n)])
  np.testing.assert_allclose(np.asarray(got.duty), ref[:, 0], rtol=1e-12, atol=1e-14)
  np.testing.assert_allclose(np.asarray(got.motor), ref[:, 1], rtol=1e-12, atol=1e-14)
  np.testing.assert_allclose(np.asarray(got.friction), ref[:, 2], rtol=1e-12, atol=1e-14)
  # every branch was exercised: saturated duty, torque limit, sticking and sliding
  assert np.any(np.abs(ref[:, 0]) == P['max_duty'])
  assert np.any(np.abs(ref[:, 1]) == P['torque_limit'])
  stop = cases['inertia'] * cases['qd'] / 0.005 + ref[:, 1] + cases['tau_e']
  assert np.any(np.abs(ref[:, 2] + stop) < 1e-15) and np.any(np.abs(ref[:, 2] + stop) > 1e-3)


def test_gradients_match_finite_differences():
  """d(τ_m + τ_f)/d(params) forward mode against central differences (float64), where the
  state slides (the friction budget is active); and finite at rest (x^a at x = 0)."""
  args = (True, 0.3, 400.0, 10.0, 0.1, 0.7, 0.2, 0.006, 0.005)
  fields = [f for f in ps.LAW_FIELDS if f != 'torque_limit']
  with _x64():
    def total(vec, qd=args[5]):
      p = _params(**dict(zip(fields, vec)))
      a = list(args)
      a[5] = qd
      t = ps.servo_torques(p, a[0], ps.ServoCommand(True, True, *a[1:4]), ps.Joint(*a[4:8]),
                           a[8])
      return t.motor + t.friction
    x0 = jnp.asarray([P[f] for f in fields])
    g = np.asarray(jax.jacfwd(total)(x0))
    h = 1e-6 * np.maximum(np.abs(np.asarray(x0)), 1e-3)
    fd = np.array([(total(x0.at[i].add(h[i])) - total(x0.at[i].add(-h[i]))) / (2 * h[i])
                   for i in range(len(fields))])
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-9)
    assert np.any(np.abs(g) > 1e-3)
    g0 = np.asarray(jax.jacfwd(lambda v: total(v, 0.0))(x0))
    assert np.all(np.isfinite(g0))


# ------------------------------------------------------------------ MJX vs MuJoCo C

T, W = 240, 2


def _commands():
  t = np.arange(T) * 0.005
  goal = 0.8 * np.sin(2 * np.pi * 0.8 * t)
  kp = np.where(t < 0.6, 800.0, 150.0)
  enable = t < 1.0                       # then back-driven: gravity against friction only
  return goal, kp, enable


def test_mjx_adapter_matches_mujoco_c_stepping_the_law():
  """The manifest under MJX (float32) against MuJoCo C (float64) stepping the NumPy law with
  MuJoCo's own qfrc_bias and mass matrix of the previous forward: same joint trajectory."""
  sim = fibril_mjx.load(MANIFEST)
  goal, kp, enable = _commands()
  b = lambda x, dt: jnp.asarray(np.broadcast_to(np.asarray(x, dt)[:, None], (T, W)))  # noqa
  cmd = ps.ServoCommand(b(np.ones(T, bool), bool), b(enable, bool), b(goal, np.float32),
                        b(kp, np.float32), b(np.zeros(T), np.float32))
  _, tr, _ = sim.rollout(sim.default_params(W), fibril_mjx.world_keys(0, W), T,
                         commands={'servo': cmd})
  q_mjx = np.asarray(tr['truth']['servo']['position'])[0]

  cfg = yaml.safe_load(MANIFEST.read_text())['components'][0]['config']
  p = {k: float(cfg.get(k, ps.PositionServoConfigModel.model_fields[k].default))
       for k in ps.LAW_FIELDS}
  m = mujoco.MjModel.from_xml_path(str(XML))
  d = mujoco.MjData(m)
  mujoco.mj_forward(m, d)
  q_c, taus = [], []
  for k in range(T + 1):
    on = k < T and enable[k]
    g, kk = (goal[k], kp[k]) if k < T else (goal[-1], kp[-1])
    on = on if k < T else False
    full = np.zeros((1, 1))
    mujoco.mj_fullM(m, d, full)
    inertia = full[0, 0]
    duty, tm, tf = reference(p, on, g, kk, 0.0, d.qpos[0], d.qvel[0], -d.qfrc_bias[0],
                             inertia, m.opt.timestep)
    d.ctrl[0] = tm + tf
    q_c.append(d.qpos[0])
    taus.append((tm, tf))
    mujoco.mj_step(m, d)
  q_c, taus = np.array(q_c), np.array(taus)
  # the run reached every regime: a saturated start, tracking, and a back-driven stretch
  assert np.any(np.abs(taus[:, 0]) > 0.3) and np.all(taus[200:, 0] == 0)
  assert np.ptp(q_c) > 0.5
  # float32 against float64 over 240 ticks of a closed loop with stick/slip friction
  np.testing.assert_allclose(q_mjx[:T], q_c[:T], atol=2e-3)
  assert np.mean(np.abs(q_mjx[:T] - q_c[:T])) < 3e-4


# ------------------------------------------------------------------ configuration


def _manifest(tmp_path, **config):
  m = yaml.safe_load(MANIFEST.read_text())
  m['model'] = str(XML)
  m['components'][0]['config'].update(config)
  path = tmp_path / 'servo.yaml'
  path.write_text(yaml.safe_dump(m))
  return path


@pytest.mark.parametrize('config, message', [
    ({'kp': 400}, 'components[0].config.kp = 400: not a fibril_sim/position_servo field: kp '
                  'is a field of each servo command'),
    ({'max_duty': 1.5}, 'components[0].config.max_duty = 1.5: input should be less than or '
                        'equal to 1'),
    ({'resistance_ohm': 0}, 'components[0].config.resistance_ohm = 0: input should be greater '
                            'than 0'),
    ({'actuator': 'nope'}, "components[0].config.actuator = 'nope': no MuJoCo actuator of that "
                           'name in the compiled model'),
])
def test_config_errors_are_one_line(tmp_path, config, message):
  with pytest.raises(FibrilError) as e:
    fibril_mjx.load(_manifest(tmp_path, **config))
  text = str(e.value)
  assert message in text, text
  assert '\n' not in text.strip()


def test_a_position_actuator_is_refused(tmp_path):
  xml = XML.read_text().replace('<motor name="servo_torque" joint="pendulum"/>',
                                '<position name="servo_torque" joint="pendulum" kp="5"/>')
  (tmp_path / 'servo.xml').write_text(xml)
  m = yaml.safe_load(MANIFEST.read_text())
  m['model'] = str(tmp_path / 'servo.xml')
  (tmp_path / 'servo.yaml').write_text(yaml.safe_dump(m))
  with pytest.raises(FibrilError) as e:
    fibril_mjx.load(tmp_path / 'servo.yaml')
  assert "must name a <motor> actuator (the servo writes its torque); 'servo_torque' is " \
         '<position>' in str(e.value)
