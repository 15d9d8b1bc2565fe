"""dcmotor under MJX: parity with MuJoCo C `mj_step`, gradients, unsupported combinations.

Error measure used throughout: max over steps and entries of |x_jax - x_c| / (1 + |x_c|), i.e.
absolute for values below 1, relative above (forces reach 13 N*m, temperatures 65 K).

Tolerances:
- float32 (MJX default) vs C float64: `TOL_F32 = 1e-4`. float32 rounds every operation at
  6e-8 relative; a 500-step trajectory of the gravity-loaded arm accumulates and amplifies
  those roundings (the stiff current state with te < dt, the exact exponential updates and the
  pendulum dynamics all feed back), measured worst 5e-5 over the cases below. 2e-4 leaves a 4x
  margin yet stays far below any modelling error: `test_tolerance_discriminates` shows that a
  1 % change of the resistance already exceeds it in every case.
- float64 (`jax_enable_x64`) vs C: `TOL_F64 = 1e-11` (measured worst ~2e-14: only summation order
  differs), seven orders tighter, so the float32 gap is precision, not physics.
"""

from __future__ import annotations

import contextlib
import dataclasses

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

from fibril_mjx.physics import dcmotor as dcm
from fibril_mjx.physics.mjx import mjx

try:
  import dcmotor_models as dm
except ImportError:   # tests/ imported as a package
  from tests import dcmotor_models as dm

TOL_F32 = 1e-4
TOL_F64 = 1e-11
N_STEPS = 500


@dataclasses.dataclass(frozen=True)
class Case:
  motor: str                 # <dcmotor> attributes
  scale: tuple = ()          # control amplitude per ctrl entry
  joint: str = ''            # hinge attributes


# one rig per feature, plus the combinations the presets use
CASES = {
    'voltage': Case('resistance="2" motorconst="0.1" gear="3"', (12,)),
    'motorconst_kt_ke': Case('resistance="2" motorconst="0.08 0.12"', (12,)),
    'nominal': Case('nominal="12 1 100" gear="2"', (12,)),
    'inductance': Case('resistance="2" motorconst="0.1" inductance="0.004" gear="3"', (12,)),
    'saturation_torque': Case('resistance="2" motorconst="0.1" saturation="0.5 0 0" gear="3"',
                              (12,)),
    'saturation_current_rate': Case(
        'resistance="2" motorconst="0.1" inductance="0.01" saturation="0 2 200"', (12,)),
    'pos_controller': Case('resistance="2" motorconst="0.1" input="pos" controller="5 0 0.3"',
                           (1.5,)),
    'vel_controller': Case('resistance="2" motorconst="0.1" input="vel" controller="0 0 0.3"',
                           (8,)),
    'ff_input': Case('resistance="2" motorconst="0.1" input="ff" controller="0 0 0.05"', (0.5,)),
    'pid_slew_imax_vmax': Case(
        'resistance="2" motorconst="0.1" input="pos" controller="5 3 0.3 4 0.2 10"', (1.5,)),
    'pos_vel_ff_ctrlrange': Case(
        'resistance="2" motorconst="0.1" input="pos vel ff" controller="5 0 0.3" '
        'ctrlrange="-1 1"', (1.5, 2, 0.4)),
    'pos_voltage': Case('resistance="2" motorconst="0.1" input="pos voltage" controller="3 0 0.2"',
                        (1.5, 4)),
    'input_none': Case('resistance="2" motorconst="0.1" input="none"'),
    'thermal': Case('resistance="2" motorconst="0.1" thermal="5 0.5 0 0.004 25 40"', (12,)),
    'thermal_inductance': Case(
        'resistance="2" motorconst="0.1" inductance="0.004" thermal="5 0.5 0 0.004 25 40"',
        (12,)),
    'cogging': Case('resistance="2" motorconst="0.1" cogging="0.05 6 0.3"', (12,)),
    'lugre': Case('resistance="2" motorconst="0.1" lugre="100 1 0.02 0.04 0.1"', (12,)),
    'damping_armature_gear': Case(
        'resistance="2" motorconst="0.1" gear="3" damping="0.01" armature="0.002"', (12,),
        joint='damping="0.02" armature="0.01"'),
    # RoboMaster M3508-like (preset constants) at gear 2 with a velocity-input controller
    'robomaster_vel': Case(
        'motorconst="0.3" resistance="0.194" inductance="9.7e-5" input="vel" '
        'controller="0 0 0.8" saturation="0 20 0" gear="2" armature="0.002"', (10,),
        joint='damping="0.01"'),
    # M2006-like with a position-input controller
    'robomaster_pos': Case(
        'motorconst="0.18" resistance="0.461" inductance="6.422e-5" input="pos" '
        'controller="8 0 0.4" saturation="0 10 0"', (1.5,)),
    'everything': Case(
        'resistance="2" motorconst="0.1" input="pos vel ff voltage" '
        'controller="5 3 0.3 4 0.2 10" inductance="0.004" thermal="5 0.5 0 0.004 25 40" '
        'lugre="100 1 0.02 0.04 0.1" cogging="0.05 6 0.3" saturation="1 0 300" gear="2" '
        'damping="0.02" armature="0.001"', (1.5, 2, 0.4, 1)),
}
# cases sharing one compiled model (independent arms): fewer compiles, same per-case checks
GROUPS = (
    ('voltage', 'motorconst_kt_ke', 'nominal', 'inductance', 'saturation_torque',
     'saturation_current_rate', 'damping_armature_gear'),
    ('pos_controller', 'vel_controller', 'ff_input', 'pid_slew_imax_vmax', 'pos_vel_ff_ctrlrange',
     'pos_voltage', 'input_none'),
    ('thermal', 'thermal_inductance', 'cogging', 'lugre', 'robomaster_vel', 'robomaster_pos',
     'everything'),
)
IMPLICIT_CASES = ('inductance', 'pid_slew_imax_vmax', 'saturation_torque', 'lugre',
                  'robomaster_vel', 'everything')
assert sorted(sum(GROUPS, ())) == sorted(CASES)


@contextlib.contextmanager
def _x64(enabled: bool):
  old = jax.config.jax_enable_x64
  jax.config.update('jax_enable_x64', enabled)
  try:
    yield
  finally:
    jax.config.update('jax_enable_x64', old)


def _err(x, ref) -> float:
  x, ref = np.asarray(x, np.float64), np.asarray(ref, np.float64)
  if ref.size == 0:
    return 0.0
  return float(np.max(np.abs(x - ref) / (1.0 + np.abs(ref))))


class Rig:
  """A compiled model: C model, twin, jitted rollout (params are traced: no recompile)."""

  def __init__(self, xml: str, use_spec: bool = True):
    self.spec = mujoco.MjSpec.from_string(xml)
    self.m = self.spec.compile()
    self.twin, self.dset = dcm.prepare(self.m, spec=self.spec if use_spec else None)
    self.mx = mjx.put_model(self.twin)
    dset, mx, m = self.dset, self.mx, self.m
    twin_act_src = np.asarray(dset.twin_act_src, dtype=int)

    def rollout(params, ctrl):
      dx = mjx.make_data(mx)
      state = dcm.init(dset, params, mx, dx)

      def body(carry, u):
        dx, state = carry
        dx, state = dcm.step(dset, params, mx, dx, u, state)
        act = jnp.zeros((m.na,), dx.qpos.dtype)
        if twin_act_src.size:
          act = act.at[twin_act_src].set(dx.act)
        act = dcm.act_from_state(dset, state, act)
        return (dx, state), (dx.qpos, dx.qvel, dx.actuator_force, act)

      _, out = jax.lax.scan(body, (dx, state), ctrl)
      return dict(zip(('qpos', 'qvel', 'actuator_force', 'act'), out))

    self.rollout = jax.jit(rollout)

  def params(self):
    return dcm.default_params(self.dset, self.m)

  def case_errors(self, ctrl, ref, params=None) -> dict[str, dict[str, float]]:
    """Per dcmotor (arm) name: error of its joint's qpos/qvel, its force and its activations."""
    out = self.rollout(self.params() if params is None else params, jnp.asarray(ctrl))
    m, errs = self.m, {}
    for name, a in zip(self.dset.names, self.dset.actuator_id):
      j = m.actuator_trnid[a, 0]
      q, v = m.jnt_qposadr[j], m.jnt_dofadr[j]
      acts = list(range(m.actuator_actadr[a], m.actuator_actadr[a] + m.actuator_actnum[a]))
      errs[name] = {
          'qpos': _err(out['qpos'][:, q], ref['qpos'][:, q]),
          'qvel': _err(out['qvel'][:, v], ref['qvel'][:, v]),
          'actuator_force': _err(out['actuator_force'][:, a], ref['actuator_force'][:, a]),
          'act': _err(out['act'][:, acts], ref['act'][:, acts]),
      }
    return errs


def _group_xml(names, option: str = '') -> str:
  return dm.arms_xml({n: (CASES[n].motor, CASES[n].joint) for n in names}, option=option)


def _group_ctrl(m, names, seed: int = 0):
  scale = np.concatenate([np.asarray(CASES[n].scale, float) for n in names])
  return dm.controls(m, N_STEPS, scale, seed=seed) if m.nu else np.zeros((N_STEPS, 0))


_RESULTS: dict = {}


def _group_of(name):
  return next(g for g in GROUPS if name in g)


def _results(kind: str, group, use_spec: bool = True) -> dict:
  """Per-case errors of one group (cached across the parametrized tests of a kind)."""
  key = (kind, group, use_spec)
  if key not in _RESULTS:
    with _x64(kind in ('f64', 'implicit_f64')):
      option = 'integrator="implicitfast"' if kind == 'implicit_f64' else ''
      rig = Rig(_group_xml(group, option), use_spec=use_spec)
      ctrl = _group_ctrl(rig.m, group)
      ref = dm.c_rollout(rig.m, ctrl)
      _RESULTS[key] = rig.case_errors(ctrl, ref)
      if kind == 'f32':
        # every parameter 1 % off: must show well above TOL_F32 for each case
        p = rig.params()
        wrong = jax.tree.map(lambda x: x * 1.01, p)
        _RESULTS[('f32_wrong', group, use_spec)] = rig.case_errors(ctrl, ref, wrong)
        _RESULTS[('f32_force', group, use_spec)] = {
            n: float(np.abs(ref['actuator_force'][:, a]).max())
            for n, a in zip(rig.dset.names, rig.dset.actuator_id)}
  return _RESULTS[key]


# ------------------------------------------------------------------------------------------------
# parity


@pytest.mark.parametrize('name', list(CASES))
def test_parity_float32(name):
  errs = _results('f32', _group_of(name))[name]
  assert all(e < TOL_F32 for e in errs.values()), errs
  # the rollout exercises the motor: forces well above the error floor
  assert _RESULTS[('f32_force', _group_of(name), True)][name] > 0.04


@pytest.mark.parametrize('name', list(CASES))
def test_tolerance_discriminates(name):
  """Parameters 1 % off show above TOL_F32: the tolerance can catch physics bugs."""
  _results('f32', _group_of(name))
  errs = _RESULTS[('f32_wrong', _group_of(name), True)][name]
  assert max(errs.values()) > 3 * TOL_F32, errs


@pytest.mark.parametrize('name', list(CASES))
def test_parity_float64(name):
  errs = _results('f64', _group_of(name))[name]
  assert all(e < TOL_F64 for e in errs.values()), errs


@pytest.mark.parametrize('name', IMPLICIT_CASES)
def test_parity_implicitfast_float64(name):
  """implicitfast: MuJoCo adds the dcmotor d(force)/d(velocity) to qDeriv; we do the same."""
  errs = _results('implicit_f64', IMPLICIT_CASES)[name]
  assert all(e < TOL_F64 for e in errs.values()), errs


# one control and at most one state each: the twin is a patched copy, no MjSpec needed
COPY_CASES = ('voltage', 'motorconst_kt_ke', 'nominal', 'inductance', 'saturation_torque',
              'saturation_current_rate', 'damping_armature_gear', 'pos_controller',
              'vel_controller', 'ff_input', 'thermal', 'cogging', 'lugre', 'robomaster_vel',
              'robomaster_pos')
COPY_IMPLICIT_CASES = ('inductance', 'saturation_torque', 'lugre', 'robomaster_vel')


@pytest.mark.parametrize('name', COPY_CASES)
def test_parity_without_spec_float64(name):
  errs = _results('f64', COPY_CASES, use_spec=False)[name]
  assert all(e < TOL_F64 for e in errs.values()), errs


@pytest.mark.parametrize('name', COPY_IMPLICIT_CASES)
def test_parity_without_spec_implicitfast_float64(name):
  errs = _results('implicit_f64', COPY_IMPLICIT_CASES, use_spec=False)[name]
  assert all(e < TOL_F64 for e in errs.values()), errs


_BEFORE = '<general name="filt" joint="hinge" dyntype="filter" dynprm="0.05" gainprm="0.2"/>'
_AFTER = '<position name="servo" joint="hinge" kp="0.5" kv="0.05"/>'


@pytest.mark.parametrize('motor,scale,use_spec', [
    ('resistance="2" motorconst="0.1" inductance="0.004" input="vel" controller="0 0 0.3"',
     (1, 3, 1), False),
    ('resistance="2" motorconst="0.1" inductance="0.004" input="vel" controller="0 0 0.3"',
     (1, 3, 1), True),
    ('resistance="2" motorconst="0.1" inductance="0.004" input="pos vel" controller="3 1 0.3"',
     (1, 1.5, 3, 1), True),
])
def test_mixed_actuators_ctrl_layout(motor, scale, use_spec):
  """Other actuators before/after the dcmotor keep their ctrl/act; edits after compile count."""
  with _x64(True):
    spec = mujoco.MjSpec.from_string(
        dm.rig_xml(motor, joint='damping="0.01"', before=_BEFORE, extra=_AFTER))
    m = spec.compile()
    m.dof_damping[0] = 0.03      # edited after compile: the twin must carry it
    m.body_mass[1] = 1.3
    twin, dset = dcm.prepare(m, spec=spec if use_spec else None)
    assert dset.actuator_id == (1,) and dset.ctrladr == (1,)
    mx = mjx.put_model(twin)
    ctrl = dm.controls(m, N_STEPS, scale)
    ref = dm.c_rollout(m, ctrl)
    p = dcm.default_params(dset, m)
    twin_act_src = np.asarray(dset.twin_act_src, dtype=int)

    def body(carry, u):
      dx, s = carry
      dx, s = dcm.step(dset, p, mx, dx, u, s)
      act = jnp.zeros((m.na,)).at[twin_act_src].set(dx.act)
      return (dx, s), (dx.qpos, dx.qvel, dx.actuator_force, dcm.act_from_state(dset, s, act))

    dx0 = mjx.make_data(mx)
    _, out = jax.jit(lambda d, s, u: jax.lax.scan(body, (d, s), u))(
        dx0, dcm.init(dset, p, mx, dx0), jnp.asarray(ctrl))
    errs = {k: _err(o, ref[k]) for k, o in zip(('qpos', 'qvel', 'actuator_force', 'act'), out)}
  assert all(e < TOL_F64 for e in errs.values()), errs


def test_vmap_per_world_params():
  """Worlds with different resistance / kd under vmap each match C with those values."""
  name = 'robomaster_vel'
  rig = Rig(_group_xml((name,)))
  ctrl = _group_ctrl(rig.m, (name,))
  p = rig.params()
  scales = np.array([0.8, 1.0, 1.3])
  batched = p._replace(resistance_ohm=p.resistance_ohm[None] * scales[:, None],
                       kd=p.kd[None] * scales[::-1, None])
  in_axes = dcm.DcMotorParams(*[0 if f in ('resistance_ohm', 'kd') else None
                                for f in dcm.DcMotorParams._fields])
  out = jax.vmap(rig.rollout, in_axes=(in_axes, None))(batched, jnp.asarray(ctrl))
  for w, (sr, sk) in enumerate(zip(scales, scales[::-1])):
    m = rig.m.__copy__()
    i = rig.dset.actuator_id[0]
    m.actuator_gainprm[i, 0] *= sr
    m.actuator_gainprm[i, 6] *= sk
    ref = dm.c_rollout(m, ctrl)
    errs = {k: _err(out[k][w], ref[k]) for k in ref if k != 'act'}
    errs['act'] = _err(out['act'][w], ref['act'])
    assert all(e < TOL_F32 for e in errs.values()), (w, errs)


def test_step_traces_once():
  rig = Rig(_group_xml(('pid_slew_imax_vmax',)))
  traces = []

  @jax.jit
  def one(params, dx, state, u):
    traces.append(1)
    return dcm.step(rig.dset, params, rig.mx, dx, u, state)

  p = rig.params()
  dx = mjx.make_data(rig.mx)
  s = dcm.init(rig.dset, p, rig.mx, dx)
  dx, s = one(p, dx, s, jnp.ones(1))
  dx, s = one(p._replace(kp=p.kp * 2), dx, s, jnp.zeros(1))
  assert len(traces) == 1


# ------------------------------------------------------------------------------------------------
# gradients


def test_gradients_match_finite_differences():
  """d loss / d (R, K, kp, ki, kd) through 100 steps vs central differences, float64."""
  names = ('resistance_ohm', 'motorconst', 'kp', 'ki', 'kd')
  with _x64(True):
    # "pos voltage": the controller path makes kp/ki/kd matter; the added terminal voltage
    # (force ~ K/R * u_voltage) makes R and K matter (with the controller alone they cancel)
    xml = dm.rig_xml('resistance="0.8" motorconst="0.12" inductance="0.002" '
                     'input="pos voltage" controller="4 2 0.3" gear="2"', joint='damping="0.02"')
    spec = mujoco.MjSpec.from_string(xml)
    m = spec.compile()
    twin, dset = dcm.prepare(m, spec=spec)
    mx = mjx.put_model(twin)
    p0 = dcm.default_params(dset, m)
    n = 100
    ctrl = jnp.asarray(dm.controls(m, n, (1.2, 3.0), seed=3))
    target = jnp.asarray(0.3 * np.sin(np.arange(n) * m.opt.timestep * 6.0))

    def loss(theta):
      p = p0._replace(**{k: theta[j][None] for j, k in enumerate(names)})
      dx = mjx.make_data(mx)

      def body(carry, u):
        dx, s = carry
        dx, s = dcm.step(dset, p, mx, dx, u, s)
        return (dx, s), (dx.qpos[0], dx.actuator_force[0])

      _, (q, f) = jax.lax.scan(body, (dx, dcm.init(dset, p, mx, dx)), ctrl)
      return jnp.mean((q - target) ** 2) + 1e-3 * jnp.mean(f ** 2)

    theta0 = jnp.array([float(getattr(p0, k)[0]) for k in names])
    grad = np.asarray(jax.jit(jax.grad(loss))(theta0))
    f = jax.jit(loss)
    fd = []
    for j in range(len(names)):
      h = 1e-6 * abs(float(theta0[j]))
      e = jnp.zeros_like(theta0).at[j].set(h)
      fd.append((float(f(theta0 + e)) - float(f(theta0 - e))) / (2 * h))
    fd = np.array(fd)
  assert np.all(np.abs(grad) > 1e-6), grad
  np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=0)


# ------------------------------------------------------------------------------------------------
# host side


def test_no_dcmotor_returns_model_unchanged():
  m = mujoco.MjModel.from_xml_string(dm.rig_xml('resistance="2" motorconst="0.1"').replace(
      '<dcmotor name="motor" joint="hinge" resistance="2" motorconst="0.1"/>',
      '<motor joint="hinge"/>'))
  twin, dset = dcm.prepare(m)
  assert twin is m and dset is None


def test_twin_is_steppable_and_set_hashable():
  rig = Rig(_group_xml(('everything',)))
  assert rig.twin.nu == rig.twin.nactuator
  assert hash(rig.dset) == hash(dataclasses.replace(rig.dset))
  assert rig.dset.slots[0] == (0, 1, 2, 3, 4)   # slew, integral, temperature, bristle, current


@pytest.mark.parametrize('motor,option,needle', [
    ('resistance="2" motorconst="0.1" input="pos vel ff" controller="5 0 0.3"', '',
     ["'motor'", 'input="pos vel ff"', '3 controls', 'spec=']),
    ('resistance="2" motorconst="0.1" input="none"', '', ["'motor'", 'input="none"', 'spec=']),
    ('resistance="2" motorconst="0.1" inductance="0.01" thermal="5 0.5 0 0.004 25 40"', '',
     ["'motor'", 'temperature, current', 'spec=']),
    ('resistance="2" motorconst="0.1"', 'integrator="RK4"', ["'motor'", 'integrator=', 'RK4']),
    ('resistance="2" motorconst="0.1" delay="0.01" nsample="5"', '',
     ["'motor'", 'delay/nsample']),
    ('resistance="2" motorconst="0.1"', '><flag actuation="disable"/></option',
     ["'motor'", 'actuation=disable']),
])
def test_unsupported_raises_naming_it(motor, option, needle):
  xml = dm.rig_xml(motor, option=option)
  if option.startswith('>'):
    xml = xml.replace(f'{option}/>', f'{option}>')
  m = mujoco.MjModel.from_xml_string(xml)
  with pytest.raises(dcm.UnsupportedDcMotor) as info:
    dcm.prepare(m)
  assert isinstance(info.value, ValueError)
  for text in needle:
    assert text in str(info.value), str(info.value)


def test_unsupported_damping_on_tendon():
  xml = """
  <mujoco><worldbody><body><joint name="a" type="hinge" axis="0 1 0"/>
    <geom type="capsule" size="0.02" fromto="0 0 0 0.3 0 0" mass="1"/></body></worldbody>
    <tendon><fixed name="t"><joint joint="a" coef="2"/></fixed></tendon>
    <actuator><dcmotor name="drive" tendon="t" resistance="2" motorconst="0.1" damping="0.1"/>
    </actuator></mujoco>"""
  m = mujoco.MjModel.from_xml_string(xml)
  with pytest.raises(dcm.UnsupportedDcMotor, match="'drive'.*damping/armature"):
    dcm.prepare(m)


def test_describe_reports_native_parameters():
  m = mujoco.MjModel.from_xml_string(_group_xml(('robomaster_vel',)))
  _, dset = dcm.prepare(m)
  (entry,) = dcm.describe(dset, m)
  assert entry['name'] == 'robomaster_vel' and entry['target'] == 'hinge_robomaster_vel'
  assert entry['input'] == 'vel' and entry['gear'] == 2.0
  assert entry['resistance_ohm'] == pytest.approx(0.194)
  assert entry['motorconst_nm_per_a'] == pytest.approx(0.3)
  assert entry['inductance_h'] == pytest.approx(9.7e-5)
  assert entry['force_range'] == pytest.approx([-6.0, 6.0])   # 20 A * 0.3 N*m/A
  assert entry['controller']['kd'] == pytest.approx(0.8)
  assert entry['states'] == ['current']


def test_accelerometer_matches_c_without_constraints():
  """MJX skips sensor_acc in constraint-free models; dcmotor.step must evaluate it like C."""
  xml = """
  <mujoco>
    <option timestep="0.002"/>
    <worldbody>
      <body name="arm">
        <joint name="hinge" type="hinge" axis="0 1 0"/>
        <geom type="capsule" size="0.02" fromto="0 0 0 0.3 0 0" mass="1" contype="0"
              conaffinity="0"/>
        <site name="tip" pos="0.3 0 0"/>
      </body>
    </worldbody>
    <actuator><dcmotor name="motor" joint="hinge" resistance="1" motorconst="0.2"/></actuator>
    <sensor><accelerometer name="acc" site="tip"/></sensor>
  </mujoco>"""
  spec = mujoco.MjSpec.from_string(xml)
  m = spec.compile()
  twin, dset = dcm.prepare(m, spec=spec)
  mx = mjx.put_model(twin)
  params = dcm.default_params(dset, m)
  d = mujoco.MjData(m)
  dx = mjx.put_data(twin, mujoco.MjData(twin))
  st = dcm.init(dset, params)
  step = jax.jit(lambda dx, u, st: dcm.step(dset, params, mx, dx, u, st))
  worst = 0.0
  for k in range(100):
    u = np.array([3.0 * np.sin(0.05 * k)])
    d.ctrl[:] = u
    mujoco.mj_step(m, d)
    dx, st = step(dx, jnp.asarray(u, jnp.float32), st)
    # C's sensordata after mj_step belongs to the state before the step, as MJX's
    worst = max(worst, float(np.max(np.abs(np.asarray(dx.sensordata) - d.sensordata))))
  assert np.abs(d.sensordata).max() > 1.0
  assert worst < 1e-3 * (1 + np.abs(d.sensordata).max()), worst   # float32 vs float64
