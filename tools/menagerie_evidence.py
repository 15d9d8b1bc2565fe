"""The evidence for devices on a robot as it comes (docs/tutorials/menagerie.md), printed as
text: the Unitree Go2 of MuJoCo Menagerie used unmodified, started from its `home` keyframe.

1. the robot's XML against upstream: SHA-256 of the carried files and the upstream values
   recorded in `assets/examples/menagerie/unitree_go2/README.md`;
2. the IMU's specific force `|a| - g` over the first second, from `qpos0` (no `keyframe`) and
   from `home` (MuJoCo C physics; no motor component: the model's position actuators hold the
   key's ctrl, or 0 without a key, as nothing else drives them);
3. each of the 12 joints at tick 0 — the MJX reset and the MuJoCo C rollout (encoder truth) —
   against MuJoCo C's `mj_resetDataKeyframe`;
4. the errors a user meets binding the robot's site and keyframe, one line each.

    .venv/bin/python tools/menagerie_evidence.py [--out DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import pathlib
import re
import tempfile

import mujoco
import numpy as np
import yaml

import fibril_mjx
from fibril_mjx.errors import FibrilError

ROOT = pathlib.Path(__file__).resolve().parents[1]
GO2 = ROOT / 'assets/examples/menagerie/unitree_go2'
G = 9.81


def _tutorial():
  spec = importlib.util.spec_from_file_location('tutorial_menagerie',
                                                ROOT / 'examples/tutorial_menagerie.py')
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def xml_hashes() -> list[tuple[str, str, str]]:
  """`(file, sha256 here, sha256 upstream as the README records it)`."""
  readme = (GO2 / 'README.md').read_text()
  rows = []
  for name in ('go2_mjx.xml', 'scene_mjx.xml', 'LICENSE'):
    m = re.search(rf'\| `{re.escape(name)}` \|[^|]*\| `([0-9a-f]{{64}})` \|', readme)
    rows.append((name, hashlib.sha256((GO2 / name).read_bytes()).hexdigest(),
                 m.group(1) if m else '(not recorded)'))
  return rows


def _write(out: pathlib.Path, name: str, doc: dict) -> pathlib.Path:
  path = out / name
  path.write_text(yaml.safe_dump(doc, sort_keys=False))
  return path


def specific_force(sim, ticks: int):
  """`(|a| - g of the delivered samples, of the truth)` of world 0, `(ticks + 1,)` each."""
  _, tr, _ = sim.rollout(sim.default_params(1), fibril_mjx.world_keys(0, 1), ticks)
  a = np.linalg.norm(np.asarray(tr['sensor']['imu'].sample.linear_acceleration)[0], axis=-1)
  t = np.linalg.norm(np.asarray(tr['truth']['imu']['linear_acceleration'])[0], axis=-1)
  return a - G, t - G, tr


def errors(tut, out: pathlib.Path) -> list[str]:
  """The one-line messages of the mistakes a user makes on this robot."""
  base = tut.manifest(tut.LEGS[:1], motors=False)
  imu = len(base['components']) - 1
  cases = []
  for config in ({'site': 'imu_'}, {'site': 'imu', 'gyroscope_sensor': 'imu_gyro'}, {}):
    doc = yaml.safe_load(yaml.safe_dump(base))
    doc['components'][imu]['config'] = {'profiles': {'device': 'icm42688p_nominal'}, **config}
    cases.append(doc)
  doc = yaml.safe_load(yaml.safe_dump(base))
  doc['keyframe'] = 'hom'
  cases.append(doc)
  # the ICM-42688-P's 500 Hz on the 4 ms step locomotion envs use: the model compiled at
  # 4 ms (a copy written from MjSpec, the meshes read from the carried folder)
  spec = mujoco.MjSpec.from_file(str(GO2 / 'scene_mjx.xml'))
  spec.option.timestep = 0.004
  spec.meshdir = str(GO2 / 'assets')
  (out / 'go2_4ms.xml').write_text(spec.to_xml())
  doc = yaml.safe_load(yaml.safe_dump(base))
  doc['model'] = 'go2_4ms.xml'
  doc['components'] = doc['components'][imu:]   # the IMU alone (the encoders set 2 ms too)
  cases.append(doc)
  lines = []
  for i, doc in enumerate(cases):
    try:
      fibril_mjx.load(_write(out, f'error_{i}.yaml', doc), physics='c')
      lines.append(f'error_{i}.yaml: (no error)')
    except FibrilError as e:
      lines.append(str(e).replace(str(out) + '/', ''))
  return lines


def main(argv=None) -> dict:
  ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  ap.add_argument('--out', default=None, help='where the manifests go (default: a temp dir)')
  args = ap.parse_args(argv)
  out = pathlib.Path(args.out or tempfile.mkdtemp(prefix='menagerie_evidence_'))
  out.mkdir(parents=True, exist_ok=True)
  tut = _tutorial()
  res = {}

  print('1. the robot\'s XML (assets/examples/menagerie/unitree_go2) against upstream')
  for name, here, up in xml_hashes():
    print(f'   {name:14s} {here}  {"== upstream" if here == up else "!= upstream " + up}')
    res[f'sha256_equal_{name}'] = here == up

  print('2. |a| - g of the IMU (site imu, ICM-42688-P), MuJoCo C physics, 1 s at 2 ms')
  ticks = 500
  for label, key in (('qpos0', None), ('home', 'home')):
    sim = fibril_mjx.load(_write(out, f'go2_{label}.yaml',
                                 tut.manifest(keyframe=key, motors=False)), physics='c')
    a, t, tr = specific_force(sim, ticks)
    settle = 50   # 0.1 s
    res[label] = dict(sample_max=float(np.abs(a).max()), truth_max=float(np.abs(t).max()),
                      settled_sample_max=float(np.abs(a[settle:]).max()),
                      settled_truth_max=float(np.abs(t[settle:]).max()),
                      median=float(np.median(a[settle:])))
    r = res[label]
    print(f'   from {label:5s}: max |a|-g over 0..1 s {r["sample_max"]:7.3f} m/s^2 (truth '
          f'{r["truth_max"]:7.3f}); over 0.1..1 s {r["settled_sample_max"]:7.3f} (truth '
          f'{r["settled_truth_max"]:.3f}); median 0.1..1 s {r["median"]:+.4f}')
    if key:
      c_sim, c_tr = sim, tr

  print('3. each joint at tick 0 vs MuJoCo C mj_resetDataKeyframe(home) (rad)')
  m = c_sim.mj_model
  d = mujoco.MjData(m)
  mujoco.mj_resetDataKeyframe(m, d, mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_KEY, 'home'))
  st = c_sim.reset(c_sim.default_params(1), fibril_mjx.world_keys(0, 1))
  qmjx = np.asarray(st.data.qpos[0], np.float64)
  res['tick0_mjx_max'], res['tick0_c_max'] = 0.0, 0.0
  print(f'   {"joint":16s} {"key":>9s} {"MJX reset":>11s} {"C rollout":>11s}')
  for leg in tut.LEGS:
    for part in tut.PARTS:
      j = m.joint(f'{leg}_{part}_joint')
      adr = int(m.jnt_qposadr[j.id])
      c0 = float(np.asarray(c_tr['truth'][f'{leg}_{part}_enc']['position'])[0, 0])
      dm, dc = qmjx[adr] - d.qpos[adr], c0 - d.qpos[adr]
      res['tick0_mjx_max'] = max(res['tick0_mjx_max'], abs(dm))
      res['tick0_c_max'] = max(res['tick0_c_max'], abs(dc))
      print(f'   {j.name:16s} {d.qpos[adr]:+9.4f} {dm:+11.2e} {dc:+11.2e}')
  res['tick0_full_state_mjx_max'] = float(np.abs(qmjx - d.qpos).max())
  print(f'   whole qpos (19) MJX reset vs key: max {res["tick0_full_state_mjx_max"]:.2e}')

  print('4. the errors (one line each)')
  res['errors'] = errors(tut, out)
  for line in res['errors']:
    print('   ' + line)
  return res


if __name__ == '__main__':
  main()
