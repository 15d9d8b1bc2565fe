"""The RL env built from a MuJoCo Playground environment (`pip install -e '.[playground]'`).

`from_playground(env, manifest)` puts fibril devices on any Playground `MjxEnv`
(`mujoco_playground.registry.load`) without editing it; the result is an `OnPlayground`, a
`FibrilEnv` (`fibril_mjx.rl.env`) whose physics is the env's. The manifest is a fibril manifest
without `model:` (the env's own MJCF, `env.xml_path`, is the model; its components bind the
env's sites, joints, actuators and sensors by their MJCF names, and the probe sensors they read
are appended to it as `fibril_mjx.load` does), plus three sections of its own:

    components:                       # as in any fibril manifest
      - {id: cart, type: fibril_sim/motor,
         config: {actuator: slide, application_period_s: 0.01, feedback_latency_s: 0.02}}
    observe:                          # observation entries <- delivered component fields
      - {obs: [0, 1], component: cart, field: position}
      - {obs: [3, 4], component: cart, field: velocity}
    act:                              # action entries -> actuator adapter commands
      - {actuator: slide, component: cart, command: effort, scale: 10.0}
    vary:                             # per-episode device draws, a campaign's `vary:` syntax
      cart.feedback_latency_s: {dist: uniform, low: 0.0, high: 0.03}

`observe:` entries: `obs: [start, stop)` of the observation vector (of `key:` for a dict
observation, default `state`), `component`, `field` of its delivered sample (`index:` one
element of a vector field); the observation keeps its size, so a policy's input layout is the
env's (no `new_data` flags are added). `act:` entries: the MJCF `actuator` whose action entry
becomes the command `command:` (a kind the component accepts, e.g. `effort`, `position`) of
value `scale · action`; every actuator component needs one.

- **Physics, reward, termination** are the env's own `step`: it runs on the env's model with the
  probe sensors appended (sensors do not change the dynamics; the env's own sensor addresses
  are unchanged, probes come after them), swapped in while the wrapper traces the env, as
  Playground's own `BraxDomainRandomizationVmapWrapper` swaps its randomized model.
- **Device ticks are env steps**: one fibril tick per env step (the env's `ctrl_dt` must equal
  its `sim_dt`, so the manifest's periods and latencies are in env steps of `ctrl_dt`). At step
  n the action's commands enter the adapters (transport latency, loss, timeouts, application
  instants) and the adapters' `ctrl` is the action the env's `step` receives (the reward's action
  too); actions of actuators without an `act:` entry pass through unchanged. After the env's
  step the sensors and feedback acquire from its `mjx.Data`: joint position / velocity readings
  (`jointpos` / `jointvel` sensors and probes) read `qpos` / `qvel` after the step, as the
  env's observation does; readings that need kinematics (sites, IMUs, forces) read the
  `sensordata` of the step's last forward (MuJoCo's `mj_step` convention).
- **Observations**: the env's own observation with the `observe:` entries replaced by the
  delivered samples (latency, held values between deliveries, lost samples); entries not
  mapped stay ideal. With a dict observation (`state` / `privileged_state`) the entries index
  `key:` (default `state`) and `privileged_state` keeps the truth; with an array observation and
  `privileged_obs=True` the observation becomes `{'state': devices, 'privileged_state': the
  env's own}` (Brax PPO's `value_obs_key`).
- **Randomization**: each `reset` draws the `vary:` terms (Params fields, transport latencies)
  from the campaign streams of the device key `fold_in(rng, DEVICE_KEY)` (`fibril_mjx.rl.
  randomize`); the env's own reset and domain randomization (`randomization_fn` of
  `wrappers.wrap_for_training`, which then vmaps this env with the model swapped in) are
  untouched. MJCF and initial-state fields are the env's to vary and are refused here.
- **Episodes**: `restart(state, rng)` (what `wrappers.AutoReset` calls at an episode boundary)
  keeps the physics and the env's own observation cached at `reset` (Playground's cached
  auto-reset) and redraws the devices from `fold_in(rng, DEVICE_KEY)`: tick 0 of the devices
  on the cached data, the cost of one device tick, not of the env's `reset`.

The device state sits in `state.info['fibril']` (`ps`: the one-world `pipeline.SimState` whose
`data` is a `pipeline.Frame`; `params`; `env_obs`: the env's own observation; `first`: the
env's data and observation at reset).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import pathlib
import tempfile
from typing import Any, Optional

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pydantic
import yaml
from mujoco import mjx

from fibril_mjx.batch.simulation import Simulation
from fibril_mjx.builder import build
from fibril_mjx.config.manifest import read_manifest
from fibril_mjx.config.validation import Strict, load_yaml, validate
from fibril_mjx.core import pipeline
from fibril_mjx.errors import ConfigError, FibrilError, did_you_mean, moved_attribute
from fibril_mjx.rl.env import FibrilEnv
from fibril_mjx.rl.randomize import DeviceRandomization

KEY = 'fibril'
DEVICE_KEY = 0x6669627   # the device key of an episode is fold_in(reset rng, DEVICE_KEY)
OWN = ('observe', 'act', 'vary', 'model')
PER_EPISODE = ('param', 'latency')


class ObserveEntry(Strict):
  obs: list[int] = pydantic.Field(min_length=2, max_length=2)
  key: Optional[str] = None
  component: str
  field: str
  index: Optional[int] = None


class ActEntry(Strict):
  actuator: str
  component: str
  command: str = 'effort'
  scale: float = 1.0


class _Device(Strict):
  observe: list[ObserveEntry] = []
  act: list[ActEntry] = []
  vary: dict[str, Any] = {}


@dataclasses.dataclass(frozen=True)
class Binding:
  """Host-resolved bindings (static).

  Attributes:
    observe: `(key or None, start, stop, component id, field, index or None)` per entry.
    act: `(actuator id, component id, command kind, scale)` per entry.
    pos_sd, pos_q, vel_sd, vel_v: `sensordata` addresses of the `jointpos` / `jointvel`
      sensors and the `qpos` / `qvel` addresses they read.
  """
  observe: tuple
  act: tuple
  pos_sd: tuple
  pos_q: tuple
  vel_sd: tuple
  vel_v: tuple


def _body(manifest, file: str) -> tuple[dict, pathlib.Path | None]:
  if isinstance(manifest, (str, pathlib.Path)):
    path = pathlib.Path(manifest)
    doc = load_yaml(path)
    if not isinstance(doc, dict):
      raise ConfigError(str(path), '', 'a mapping (components, observe, act, vary)', doc)
    return doc, path.resolve().parent
  return dict(manifest), None


def manifest_file(env, body: dict, base: pathlib.Path | None, file: str) -> pathlib.Path:
  """Writes the fibril manifest of `body` over `env.xml_path` (a content-addressed file in the
  temp directory; relative `profile_paths` / `packages` resolved against `base`)."""
  if 'model' in body:
    raise ConfigError(file, 'model', 'the model is the env\'s own MJCF (env.xml_path); '
                      'leave model: out', body['model'])
  man = {k: v for k, v in body.items() if k not in OWN}
  man.setdefault('fibril_manifest', 1)
  man['model'] = str(pathlib.Path(env.xml_path).resolve())
  if base is not None:
    man['profile_paths'] = [str((base / p).resolve()) for p in man.get('profile_paths', [])]
    man['packages'] = {k: str((base / p).resolve()) for k, p in man.get('packages', {}).items()}
  text = yaml.safe_dump(man, sort_keys=True)
  out = pathlib.Path(tempfile.gettempdir()) / 'fibril_mjx_playground'
  out.mkdir(exist_ok=True)
  path = out / f'{hashlib.sha256(text.encode()).hexdigest()[:16]}.yaml'
  if not path.exists():
    path.write_text(text, encoding='utf-8')
  return path


def _check_model(env, built, file: str) -> None:
  """The compiled model must be the env's (same structure and step); ctrl_dt = sim_dt."""
  m, b = env.mj_model, built.mj_model
  for name in ('nq', 'nv', 'nu', 'nbody', 'njnt', 'ngeom'):
    if getattr(m, name) != getattr(b, name):
      raise FibrilError(f'{file}: the env\'s model and {env.xml_path} differ ({name} '
                        f'{getattr(m, name)} vs {getattr(b, name)}): the env edits its model '
                        'after loading; from_playground needs an env whose model is '
                        'its MJCF file')
  if abs(float(env.dt) - float(env.sim_dt)) > 1e-12 or abs(
      float(m.opt.timestep) - built.dt) > 1e-12:
    raise FibrilError(f'{file}: from_playground runs one device tick per env step: it '
                      f'needs ctrl_dt = sim_dt = the MJCF timestep (env ctrl_dt {env.dt}, sim_dt '
                      f'{env.sim_dt}, MJCF {built.dt})')


def _joint_reads(mj: mujoco.MjModel) -> tuple:
  """`sensordata` addresses of the jointpos / jointvel sensors and the state they read."""
  out = ([], [], [], [])
  for i in range(mj.nsensor):
    t, j, adr = mj.sensor_type[i], mj.sensor_objid[i], int(mj.sensor_adr[i])
    if t == mujoco.mjtSensor.mjSENS_JOINTPOS:
      out[0].append(adr)
      out[1].append(int(mj.jnt_qposadr[j]))
    elif t == mujoco.mjtSensor.mjSENS_JOINTVEL:
      out[2].append(adr)
      out[3].append(int(mj.jnt_dofadr[j]))
  return tuple(tuple(x) for x in out)


def _bind(env, built, dev: _Device, obs_shape, file: str) -> Binding:
  comps = built.components
  observe = []
  for i, e in enumerate(dev.observe):
    where = f'observe[{i}]'
    if e.component not in comps:
      raise ConfigError(file, f'{where}.component', 'no component of that id'
                        + did_you_mean(e.component, comps), e.component)
    sample = jax.eval_shape(lambda c=comps[e.component]: c.output(
        c.init(c.default_params(), jax.random.PRNGKey(0))).sample)
    if not hasattr(sample, '_fields') or e.field not in sample._fields:
      names = getattr(sample, '_fields', ())
      raise ConfigError(file, f'{where}.field', f'not a field of {e.component}\'s sample'
                        + did_you_mean(e.field, names) + f'; fields: {", ".join(names)}',
                        e.field)
    shape = obs_shape if not isinstance(obs_shape, dict) else obs_shape.get(e.key or 'state')
    if shape is None:
      raise ConfigError(file, f'{where}.key', 'no observation entry of that key; keys: '
                        + ', '.join(obs_shape), e.key)
    start, stop = e.obs
    if not 0 <= start < stop <= shape[-1]:
      raise ConfigError(file, f'{where}.obs', f'a range [start, stop) inside the observation '
                        f'(size {shape[-1]})', e.obs)
    size = int(np.prod(getattr(sample, e.field).shape, dtype=int))
    if e.index is not None:
      size = 1
    if size != stop - start:
      raise ConfigError(file, f'{where}.obs', f'{stop - start} entries for a field of size '
                        f'{size}', e.obs)
    observe.append((e.key if isinstance(obs_shape, dict) else None, start, stop, e.component,
                    e.field, e.index))
  act, seen = [], set()
  actuator_ids = {cid for cid, _ in pipeline.actuators(built)}
  names = [built.mj_model.actuator(i).name for i in range(built.mj_model.nu)]
  for i, e in enumerate(dev.act):
    where = f'act[{i}]'
    if e.actuator not in names:
      raise ConfigError(file, f'{where}.actuator', 'no actuator of that name in the env\'s '
                        'model' + did_you_mean(e.actuator, names), e.actuator)
    if e.component not in actuator_ids:
      raise ConfigError(file, f'{where}.component', 'no actuator component of that id'
                        + did_you_mean(e.component, actuator_ids), e.component)
    kinds = getattr(comps[e.component], 'accepted_kinds', None)
    if kinds is not None and e.command not in kinds:
      raise ConfigError(file, f'{where}.command', f'a command kind {e.component} accepts: '
                        + ', '.join(kinds), e.command)
    act.append((names.index(e.actuator), e.component, e.command, float(e.scale)))
    seen.add(e.component)
  missing = sorted(actuator_ids - seen)
  if missing:
    raise ConfigError(file, 'act', 'every actuator component needs an act: entry (its '
                      'actuator\'s action becomes its command)', missing[0])
  if built.actuator_script.ctrl_index:
    raise ConfigError(file, 'actuator_script', 'the env drives its actuators; use act:',
                      list(built.actuator_script.ctrl_index))
  return Binding(tuple(observe), tuple(act), *_joint_reads(built.mj_model))


def from_playground(env, manifest, *, privileged_obs: bool = False,
                    params: dict | None = None) -> 'OnPlayground':
  """The RL env of a Playground `MjxEnv` with the devices of `manifest` (module doc).

  Args:
    env: a Playground `MjxEnv` (one world; `wrappers.wrap_for_training` batches it).
    manifest: a YAML path or a dict without `model:`, with `observe:`, `act:`, `vary:`.
    privileged_obs: with an array observation, observe `{'state', 'privileged_state'}`.
    params: one world's `{component id: Params}` (default the manifest's).
  """
  return OnPlayground(env, manifest, privileged_obs=privileged_obs, params=params)


class OnPlayground(FibrilEnv):
  """The `FibrilEnv` of a Playground env with devices (module doc); built by
  `from_playground(env, manifest, privileged_obs=, params=)`.

  Attributes:
    playground: the Playground env.
    sim: the `Simulation` of the devices on the env's MJCF (probes appended).
    binding: the host-resolved `observe:` / `act:` entries (`Binding`).
  """
  EPISODE_FIELDS = ('data',)
  EPISODE_INFO = (KEY,)
  task = None

  def __init__(self, env, manifest, *, privileged_obs: bool = False,
               params: dict | None = None):
    # pylint: disable=super-init-not-called  (the manifest env's constructor builds a Task)
    body, base = _body(manifest, 'manifest')
    file = str(manifest) if isinstance(manifest, (str, pathlib.Path)) else 'manifest'
    dev = validate(_Device, {k: body[k] for k in ('observe', 'act', 'vary') if k in body},
                   file=file)
    path = manifest_file(env, body, base, file)
    sim = Simulation(build.build(read_manifest(path)))
    self.randomization = None
    if dev.vary:
      self.randomization = DeviceRandomization(sim, dev.vary, file=file)
      for f in self.randomization.fields:
        if f.kind not in PER_EPISODE:
          raise ConfigError(file, f'vary.{f.path}', 'from_playground varies the '
                            'devices only (Params fields, latencies); vary the physics with '
                            'the env\'s own randomization_fn', f.path)
      sim = self.randomization.sim
    self.playground = env
    self.sim, self.built = sim, sim.built
    _check_model(env, self.built, file)
    self._mj = self.built.mj_model
    self._mjx = mjx.put_model(self._mj, impl=env.mjx_model.impl.value)
    # the model the env is traced on; Playground's domain-randomization vmap sets it per env
    self._mjx_model = self._mjx
    self.privileged_obs = privileged_obs
    self.default_params = sim.default_params() if params is None else params
    with self._swap():
      env_obs = jax.eval_shape(env.reset, jax.random.PRNGKey(0)).obs
    shape = jax.tree.map(lambda x: x.shape, env_obs)
    self.binding = _bind(env, self.built, dev, shape, file)

  @contextlib.contextmanager
  def _swap(self):
    """The env traced on `self._mjx_model` (the model with the probes appended, or a
    randomized copy of it) and its `mj_model` with the probes (restored after)."""
    env = self.playground.unwrapped
    old = env._mj_model, env._mjx_model   # pylint: disable=protected-access
    env._mj_model, env._mjx_model = self._mj, self._mjx_model
    try:
      yield env
    finally:
      env._mj_model, env._mjx_model = old

  def __getattr__(self, name):
    """The Playground env's other attributes (`dt`, `sim_dt`, `xml_path`, `render`, ...)."""
    if name in ('__setstate__', 'playground'):
      raise AttributeError(name)
    return getattr(self.playground, name)

  @property
  def mj_model(self) -> mujoco.MjModel:
    """The env's model with the probe sensors appended."""
    return self._mj

  @property
  def mjx_model(self):
    return self._mjx

  @property
  def xml_path(self) -> str:
    return self.playground.xml_path

  @property
  def action_size(self) -> int:
    return self.playground.action_size

  @property
  def observation_size(self):
    obs = jax.eval_shape(self.reset, jax.random.PRNGKey(0)).obs
    if isinstance(obs, dict):
      return {k: v.shape for k, v in obs.items()}
    return obs.shape[-1]

  # ---------------------------------------------------------------- env interface

  def reset(self, rng: jax.Array):
    """The env's `reset(rng)`, then device tick 0 on its data (`pipeline.init` with
    `WorldStart(frame=...)`) with this episode's device draws from `fold_in(rng, DEVICE_KEY)`."""
    with self._swap() as env:
      st = env.reset(rng)
    first = {'data': st.data, 'env_obs': st.obs}
    return self._finish(st, self._devices(st.data, rng), first)

  def restart(self, state, rng: jax.Array):
    """A new episode from the physics cached at `reset` (`info['fibril']['first']`) with new
    device draws and device tick 0 from `fold_in(rng, DEVICE_KEY)`; the env's own `info`
    carries over, as with Playground's cached auto-reset."""
    first = state.info[KEY]['first']
    st = state.replace(data=first['data'], obs=first['env_obs'])
    return self._finish(st, self._devices(first['data'], rng), first)

  def step(self, state, action: jax.Array):
    """Device tick n: the action's commands through the adapters (their `ctrl` is the env's
    action), the env's own `step`, then the acquisitions and deliveries on its data."""
    b, built = self.binding, self.built
    info = dict(state.info)
    dev = info.pop(KEY)
    ps, params = dev['ps'], dev['params']
    tick = ps.tick + 1
    inputs = pipeline.tick_inputs(built, ps.clocks, self._commands(action), tick)
    comps, ctrl = pipeline.actuate(built, params, ps.components, ps.data, ps.ctrl,
                                   inputs.commands, tick, inputs.pre)
    if b.act:
      ids = np.asarray([a[0] for a in b.act])
      action = jnp.asarray(action).at[ids].set(ctrl[ids].astype(jnp.asarray(action).dtype))
    with self._swap() as env:
      st = env.step(state.replace(obs=dev['env_obs'], info=info), action)
    frame = self._frame(st.data, ctrl)
    comps = pipeline.sense(built, params, comps, frame, tick, inputs.post)
    diverged = jnp.where((ps.diverged < 0) & ~pipeline.finite(frame, comps), tick, ps.diverged)
    ps = pipeline.SimState(tick, inputs.clocks, frame, ctrl, (), comps, diverged)
    return self._finish(st, (ps, params), dev['first'])

  # ---------------------------------------------------------------- helpers

  def _devices(self, data, rng):
    """`(ps, params)` of device tick 0 on `data`, drawn from `fold_in(rng, DEVICE_KEY)`."""
    key = jax.random.fold_in(rng, DEVICE_KEY)
    params, latency = self.default_params, None
    if self.randomization is not None:
      params, _, _, _, latency = self.randomization.apply(params,
                                                          self.randomization.draw(key))
    ps = pipeline.init(self.built, params, key,
                       pipeline.WorldStart(latency=latency, frame=self._frame(data, data.ctrl)))
    return ps, params

  def _finish(self, st, devices, first):
    ps, params = devices
    obs = self._observe(st.obs, ps)
    info = {**st.info, KEY: {'ps': ps, 'params': params, 'env_obs': st.obs, 'first': first}}
    return st.replace(obs=obs, info=info)

  def _frame(self, data, ctrl) -> pipeline.Frame:
    """The device view of the env's data: its `sensordata` with the joint readings set to
    `qpos` / `qvel` after the step (module doc)."""
    b = self.binding
    sd = data.sensordata
    if b.pos_sd:
      sd = sd.at[np.asarray(b.pos_sd)].set(data.qpos[np.asarray(b.pos_q)])
    if b.vel_sd:
      sd = sd.at[np.asarray(b.vel_sd)].set(data.qvel[np.asarray(b.vel_v)])
    return pipeline.Frame(data.qpos, data.qvel, data.act, sd, ctrl)

  def _commands(self, action) -> dict:
    """`{component id: command}` of one action (each `act:` entry issues every step)."""
    comps = self.built.components
    return {cid: comps[cid].script_command(kind, scale * action[i], 0.0, {})
            for i, cid, kind, scale in self.binding.act}

  def _observe(self, env_obs, ps):
    """The env's observation with the `observe:` entries set to the delivered samples."""
    delivered = pipeline.sensor_outputs(self.built, ps.components)
    obs = dict(env_obs) if isinstance(env_obs, dict) else {None: env_obs}
    for key, start, stop, cid, field, index in self.binding.observe:
      v = getattr(delivered[cid].sample, field)
      v = jnp.ravel(v if index is None else jnp.ravel(v)[index])
      k = key or ('state' if isinstance(env_obs, dict) else None)
      obs[k] = obs[k].at[start:stop].set(v.astype(obs[k].dtype))
    if not isinstance(env_obs, dict):
      if self.privileged_obs:
        return {'state': obs[None], 'privileged_state': env_obs}
      return obs[None]
    return obs


def __getattr__(name):   # PEP 562: the names that moved (fibril_mjx.errors.MOVED)
  return moved_attribute(__name__, name)
