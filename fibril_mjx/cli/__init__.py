"""`fibril-mjx` command line: `plan`, `run`, `export-mcap`, `export-mavlink`, `schema`, `profiles`, `tune`, ..."""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import warnings

import yaml

# No module below initializes a JAX backend when imported (the XLA flags of `cpu_flags` in
# `main` are read when JAX first initializes one, after the command line is parsed).
from fibril_mjx.batch.simulation import load
from fibril_mjx.batch.worlds import WorldsStalled, cpu_flags
from fibril_mjx.config.overrides import parse_assignments
from fibril_mjx.config.validation import load_yaml
from fibril_mjx.errors import ConfigError, FibrilError
from fibril_mjx.io import mavlink_hil, mcap_export, outdir
from fibril_mjx.workflows import fit_profile, plan, profiles as profiles_cli, replay, schema, tune
from fibril_mjx.workflows import run as runner
from fibril_mjx.workflows import stopping, validate
from fibril_mjx.workflows.campaign import execute as campaign_run
from fibril_mjx.workflows.campaign import spec as campaign_spec


def _setup_jax():
  import jax
  cache = os.environ.get('FIBRIL_MJX_CACHE',
                         os.path.join(os.path.expanduser('~'), '.cache', 'fibril_mjx', 'jax'))
  jax.config.update('jax_compilation_cache_dir', cache)
  # every compilation, not only those over JAX's default 1 s (why: docs/internals/performance.md,
  # "Compilation cache")
  jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.0)
  jax.config.update('jax_persistent_cache_min_entry_size_bytes', 0)


def _cmd_plan(args) -> int:
  sim = load(args.manifest, overrides=parse_assignments(args.set))
  print(plan.render(sim))
  return 0


def _cmd_export_mcap(args) -> int:
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always', mcap_export.UnmappedComponentWarning)
    counts = mcap_export.export_mcap(args.run_dir, args.out,
                                     worlds=mcap_export.parse_worlds(args.worlds),
                                     overwrite=args.overwrite)
  for w in caught:
    print(f'warning: {w.message}', file=sys.stderr)
  print(f'wrote {args.out} ({sum(counts.values())} messages on {len(counts)} topics)')
  return 0


def _cmd_schema(args) -> int:
  text = schema.schema_json(args.kind)
  if args.out:
    with open(args.out, 'w', encoding='utf-8') as f:
      f.write(text)
  else:
    print(text, end='')
  return 0


def _cmd_profiles(args) -> int:
  print(profiles_cli.render(args.action, args.name, manifest=args.manifest))
  return 0


def _add_extra_commands(sub) -> None:
  """`export-mcap`, `schema`, `profiles list|show`."""
  e = sub.add_parser('export-mcap', help='write a run directory as ROS 2 messages in an MCAP file')
  e.add_argument('run_dir')
  e.add_argument('--worlds', default=None,
                 help='comma-separated global world indices, e.g. 0,3 (default: all traced)')
  e.add_argument('--out', required=True, help='the .mcap file to write')
  e.add_argument('--overwrite', action='store_true', help='replace an existing --out')
  e.set_defaults(func=_cmd_export_mcap)
  s = sub.add_parser('schema', help='print the JSON Schema of a manifest (or of a campaign or '
                     'tune file)')
  s.add_argument('--kind', choices=('manifest', 'campaign', 'tune'), default='manifest',
                 help='which file format (default: manifest)')
  s.add_argument('--out', default=None, help='write to this file instead of stdout')
  s.set_defaults(func=_cmd_schema)
  pr = sub.add_parser('profiles', help='list the shipped profiles or show one with provenance')
  pr.add_argument('action', choices=('list', 'show'))
  pr.add_argument('name', nargs='?', default=None, help='profile id (for show)')
  pr.add_argument('--manifest', default=None,
                  help="also the catalogs of this manifest's profile_paths")
  pr.set_defaults(func=_cmd_profiles)


def _cmd_export_mavlink(args) -> int:
  chosen = {k: getattr(args, k) for k in ('imu', 'mag', 'baro', 'airspeed', 'gps')
            if getattr(args, k) is not None}
  r = mavlink_hil.export_tlog(args.run_dir, args.out, world=args.world, chosen=chosen,
                              overwrite=args.overwrite, body_axes=args.body_axes,
                              geoid_separation_m=args.geoid_separation_m)
  src = ', '.join(f'{k}={v}' for k, v in r['sources'].items())
  print(f'wrote {args.out}: {r["HIL_SENSOR"]} HIL_SENSOR, {r["HIL_GPS"]} HIL_GPS ({src})')
  return 0


def _add_mavlink_command(sub) -> None:
  """`export-mavlink`: a run directory as MAVLink HIL_SENSOR / HIL_GPS (.tlog)."""
  e = sub.add_parser('export-mavlink',
                     help='write one world of a run directory as MAVLink HIL_SENSOR and HIL_GPS '
                     'messages in a .tlog')
  e.add_argument('run_dir')
  e.add_argument('--out', required=True, help='the .tlog file to write')
  e.add_argument('--world', type=int, default=None, help='global world index (default: the first traced)')
  for k in ('imu', 'mag', 'baro', 'airspeed', 'gps'):
    e.add_argument(f'--{k}', default=None, metavar='ID',
                   help=f'component id of the {k} source (default: found by its sample fields; '
                   '"" leaves it out)')
  e.add_argument('--body-axes', choices=('flu', 'frd'), default='flu',
                 help='axes of the sensor sites (flu: x forward, y left, z up, mapped to '
                 "MAVLink's FRD; frd: passed through)")
  e.add_argument('--geoid-separation-m', type=float, default=0.0,
                 help='geoid above the WGS-84 ellipsoid (HIL_GPS.alt is MSL; default 0)')
  e.add_argument('--overwrite', action='store_true', help='replace an existing --out')
  e.set_defaults(func=_cmd_export_mavlink)


def _cmd_validate(args) -> int:
  perturb = {}
  for item in args.perturb:
    if '=' not in item:
      raise ConfigError('--perturb', item, 'expected FIELD=VALUE (YAML value)')
    k, v = item.split('=', 1)
    perturb[k.strip()] = yaml.safe_load(v)
  summary = validate.run(args.manifest, args.component, args.out,
                         static_duration_s=args.static_duration, worlds=args.worlds,
                         seed=args.seed, perturb=perturb, overwrite=args.overwrite)
  print(validate.render(summary), end='')
  print(f'wrote {args.out}')
  return 0 if summary['passed'] else 1


def _cmd_fit_profile(args) -> int:
  csv_map = None
  if args.csv_map:
    csv_map = (load_yaml(pathlib.Path(args.csv_map)), args.csv_map)
  logs = fit_profile.Logs(static=args.static, six=args.six_orientation, timing=args.timing,
                          thermal=args.thermal)
  options = fit_profile.FitOptions(
      profile_id=args.id, csv_map=csv_map, topics=args.topics, overwrite=args.overwrite,
      reference_temperature_c=args.reference_temperature_c, find_rest=args.find_rest,
      power_ups=args.power_ups)
  res = fit_profile.fit_profile(component_type=args.type, component=args.component,
                                out=args.out, logs=logs, options=options)
  for k, v in res['fields'].items():
    print(f'{k}: {v}')
  print(f'wrote {args.out} and its evidence beside it')
  return fit_profile.report(res)


def _add_validation_commands(sub) -> None:
  """`validate` and `fit-profile`."""
  v = sub.add_parser('validate', help='virtual test rigs (SPEC §12 minimum test set) for one '
                     'sensor component (IMU, AHRS, magnetometer, barometer, airspeed, '
                     'rangefinder, GNSS, optical flow, lidar, camera): checks with plots; exit 1 '
                     'when a check fails')
  v.add_argument('manifest')
  v.add_argument('--component', required=True,
                 help='component id (of type fibril_sim/imu, ahrs, magnetometer, barometer, '
                 'airspeed, rangefinder, gnss, optical_flow, lidar or camera)')
  v.add_argument('--out', required=True,
                 help='output directory (new or empty, unless --overwrite)')
  v.add_argument('--static-duration', type=_positive_float, default=100.0,
                 help='seconds of each static record (default 100; longer resolves slower '
                 'bias terms)')
  v.add_argument('--worlds', type=_positive_int, default=16,
                 help='worlds per rig = independent realizations (default 16)')
  v.add_argument('--seed', type=int, default=0)
  v.add_argument('--perturb', action='append', default=[], metavar='FIELD=VALUE',
                 help='simulate a device that differs from the configuration in FIELD (the '
                 'checks keep the configured value): shows which check catches it')
  v.add_argument('--overwrite', action='store_true', help='replace an existing --out')
  v.set_defaults(func=_cmd_validate)
  f = sub.add_parser('fit-profile', help='estimate an empirical profile (+ evidence) from '
                     'recordings of a real unit; exit 3 when the fitted model does not '
                     'reproduce the held-out part on some axis')
  f.add_argument('--type', required=True, help='fibril_sim/imu or fibril_sim/ahrs')
  f.add_argument('--component', required=True, help='component id in the recordings')
  f.add_argument('--static', nargs='+', default=[], help='recordings at rest (noise terms)')
  f.add_argument('--six-orientation', nargs='+', default=[],
                 help='recordings resting on each of the six faces (bias, scale, cross-axis)')
  f.add_argument('--timing', nargs='+', default=[], help='recordings for period/latency/loss')
  f.add_argument('--thermal', nargs='+', default=[],
                 help='IMU at rest, one soaked log per chamber set-point, with temperature_c '
                 '(bias temperature coefficients k1, k2)')
  f.add_argument('--reference-temperature-c', type=float, default=25.0,
                 help='T_ref of the fitted bias polynomial (default 25)')
  f.add_argument('--csv-map', default=None, help='YAML column mapping for .csv recordings')
  f.add_argument('--topics', default=None, metavar='ID=TOPIC[,ID=TOPIC]',
                 help='for ROS bags (rosbag2 directory or .mcap/.db3, ROS 1 .bag): which topic '
                 'holds which component, e.g. imu=/imu/data')
  f.add_argument('--out', required=True, help='profile YAML to write')
  f.add_argument('--find-rest', action='store_true',
                 help='IMU: find the stretches at rest inside each --static log (one session '
                 'log will do); prints its thresholds and the stretches used')
  f.add_argument('--power-ups', action='store_true',
                 help='IMU: the --static logs are separate power-ups (fits the turn-on bias '
                 'dispersion across them, with 3 or more); without it none is reported')
  f.add_argument('--id', default=None, help='profile id (default: the file stem)')
  f.add_argument('--overwrite', action='store_true')
  f.set_defaults(func=_cmd_fit_profile)


def _cmd_campaign(args) -> int:
  over = campaign_spec.Overrides(worlds=args.worlds, duration_s=args.duration,
                                chunk_worlds=args.chunk_worlds, policy=args.policy)
  campaign_run.run(args.campaign, args.out, over, resume=args.resume, backend=args.backend,
                   ray_address=args.ray_address)
  return 0


def _cmd_replay(args) -> int:
  res = replay.replay(args.dir, args.world, args.out, overwrite=args.overwrite)
  same = res.get('equal_to_campaign_row')
  print(f'wrote {args.out}/: metrics.json, trace.npz, plots'
        + ('' if same is None else f'; metrics equal to the campaign row: {same}'))
  return 0


def _add_campaign_commands(sub) -> None:
  """`campaign`, `replay`."""
  c = sub.add_parser('campaign', help='run a Monte Carlo campaign into resumable Parquet parts')
  c.add_argument('campaign')
  c.add_argument('--out', required=True, help='output directory')
  c.add_argument('--worlds', type=_positive_int, default=None, help="replaces the file's")
  c.add_argument('--duration', type=_positive_float, default=None, help='seconds')
  c.add_argument('--chunk-worlds', type=_positive_int, default=None)
  c.add_argument('--policy', default=None, help="policy checkpoint replacing the file's "
                 'controller.policy (the same campaign for another policy)')
  c.add_argument('--resume', action='store_true', help='continue --out, skipping done chunks')
  c.add_argument('--backend', choices=('local', 'ray'), default='local')
  c.add_argument('--ray-address', default=None,
                 help='address of an existing Ray cluster (e.g. 127.0.0.1:6379)')
  c.set_defaults(func=_cmd_campaign)
  r = sub.add_parser('replay', help='re-run one world of a campaign with its full trace')
  r.add_argument('dir', help='campaign output directory')
  r.add_argument('--world', type=int, required=True)
  r.add_argument('--out', required=True)
  r.add_argument('--overwrite', action='store_true')
  r.set_defaults(func=_cmd_replay)


def _cmd_run(args) -> int:
  try:
    options = runner.RunOptions(
        trace_worlds=args.trace_worlds, chunk_worlds=args.chunk_worlds, overwrite=args.overwrite,
        share_physics=not args.no_share_physics, impl=args.impl, stall_s=args.stall_s,
        physics=args.physics, trajectory=args.trajectory, command=args.argv)
    runner.run(args.manifest, worlds=args.worlds, seed=args.seed, duration_s=args.duration,
               out=args.out, options=options)
  except WorldsStalled as e:
    # The stalled XLA threads never return: report and leave without waiting for them.
    print(f'error: {e}', file=sys.stderr)
    sys.stderr.flush()
    os._exit(3)
  return 0


def _positive_int(text):
  v = int(text)
  if v <= 0:
    raise argparse.ArgumentTypeError(f'must be a positive integer, got {text}')
  return v


def _positive_float(text):
  v = float(text)
  if not v > 0:
    raise argparse.ArgumentTypeError(f'must be > 0, got {text}')
  return v


def _cmd_tune(args) -> int:
  if args.fleet:
    outdir.claim(args.out, overwrite=args.overwrite)
    res = tune.tune_fleet(args.tune_file)
    tune.write_fleet(res, args.out, overwrite=args.overwrite)
    print(tune.render_fleet(res), end='')
    print(f'wrote {args.out} (units.csv, report.txt, report.json)')
    return 0
  res = tune.run_cli(args.tune_file, args.out, overwrite=args.overwrite)
  print(tune.render_report(res), end='')
  print(f'wrote {args.out} (overlay.yaml, report.txt, report.json, loss_curve.png, '
        'heldout_traces.png)')
  if not res.moved:   # a failed run (exit 1, as a failed check): the start is no fit
    print(f'error: the fit did not move from its start ({res.stop}); try: {res.advice}',
          file=sys.stderr)
    return 1
  return 0


def _add_tune_command(sub) -> None:
  """`tune`."""
  t = sub.add_parser('tune', help='fit component fields and MJCF physical fields to recordings '
                     '(writes an overlay and a report)')
  t.add_argument('tune_file')
  t.add_argument('--out', required=True,
                 help='output directory (new or empty, unless --overwrite)')
  t.add_argument('--overwrite', action='store_true', help='replace an existing --out')
  t.add_argument('--fleet', action='store_true',
                 help='every training recording is its own unit, with its own parameters, all '
                      'fitted in one batch (MuJoCo C); writes units.csv')
  t.set_defaults(func=_cmd_tune)


def main(argv=None) -> int:
  # --cpu-isa is accepted before or after the command (it configures XLA, not a command)
  isa = argparse.ArgumentParser(prog='fibril-mjx', add_help=False)
  isa.add_argument('--cpu-isa', choices=('avx', 'native'), default='avx',
                   help='XLA CPU code generation: avx (default; no FMA, so a world\'s results '
                   'are bitwise identical in any batch, chunk or device count) or native '
                   '(the host\'s full ISA, up to ~30 %% faster on simple models; layouts then '
                   'agree to float rounding)')
  # the command line as given, for meta.json (the process's own when called as fibril-mjx)
  command = list(sys.argv) if argv is None else ['fibril-mjx', *map(str, argv)]
  isa_args, argv = isa.parse_known_args(command[1:])
  parser = argparse.ArgumentParser(prog='fibril-mjx', description=__doc__, parents=[isa])
  sub = parser.add_subparsers(dest='command', required=True)
  p = sub.add_parser('plan', help='print the resolved plan of a manifest')
  p.add_argument('manifest')
  p.add_argument('--set', action='append', default=[], metavar='ID.FIELD=VALUE',
                 help='override a component field (or ELEMENT:NAME.ATTRIBUTE=VALUE, a MJCF '
                 'attribute) as the last layer; repeatable')
  p.set_defaults(func=_cmd_plan)
  r = sub.add_parser('run', help='run a batch of worlds and write traces, summary and plots')
  r.add_argument('manifest')
  r.add_argument('--worlds', type=_positive_int, default=256)
  r.add_argument('--seed', type=int, default=0)
  r.add_argument('--duration', type=_positive_float, default=10.0, help='seconds')
  r.add_argument('--out', required=True,
                 help='output directory (new or empty, unless --overwrite)')
  r.add_argument('--trace-worlds', type=int, default=16,
                 help='worlds whose full per-tick traces are written (default 16)')
  r.add_argument('--chunk-worlds', type=_positive_int, default=None,
                 help='worlds per host chunk (default: what a 1 GiB budget for the recorded '
                 'outputs allows; results never depend on it)')
  r.add_argument('--overwrite', action='store_true', help='replace an existing --out')
  r.add_argument('--devices', type=_positive_int, default=None,
                 help='XLA CPU devices to shard the worlds over (default: one per core; GPUs: '
                 'every GPU)')
  r.add_argument('--no-share-physics', action='store_true',
                 help='one physics rollout per world even when all worlds could share one')
  r.add_argument('--impl', choices=('jax', 'warp'), default='jax',
                 help='physics implementation: MJX-JAX (default) or MJX-Warp (NVIDIA GPU)')
  r.add_argument('--physics', choices=('auto', 'mjx', 'c', 'trajectory'), default='auto',
                 help='physics backend: mjx (MJX in the loop), c (MuJoCo C through '
                 'mujoco.rollout, open loop), trajectory (a recorded state log: needs '
                 '--trajectory LOG, which implies it), auto (default: c on a CPU when nothing '
                 'closes a loop on physics, else mjx; the summary says which and why)')
  r.add_argument('--trajectory', default=None, metavar='LOG',
                 help='replay a recorded state log (NPZ / Parquet: qpos[, qvel, qacc, ctrl, '
                 'act, time]) under the device models instead of simulating the physics; with '
                 'qacc the accelerometer reads the logged accelerations')
  r.add_argument('--stall-s', type=float, default=None,
                 help='watchdog: error out when a program makes no CPU progress for this '
                 'long (default 120 s; 0: off)')
  r.set_defaults(func=_cmd_run)
  _add_extra_commands(sub)
  _add_mavlink_command(sub)
  _add_campaign_commands(sub)
  _add_validation_commands(sub)
  _add_tune_command(sub)
  args = parser.parse_args(argv)
  args.argv = command
  # One XLA CPU device per core (or --devices N), no FMA (--cpu-isa), before JAX initializes.
  cpu_flags(getattr(args, 'devices', None), bitwise=isa_args.cpu_isa == 'avx')
  _setup_jax()
  try:
    return args.func(args)
  except FibrilError as e:
    for line in str(e).splitlines():
      print(f'error: {line}', file=sys.stderr)
    return 2
  except stopping.Stopped as e:   # SIGINT / SIGTERM: what was kept
    print(e, file=sys.stderr)
    return 128 + e.signum
  except KeyboardInterrupt:
    print('interrupted; no output written', file=sys.stderr)
    return 130
  except OSError as e:   # a write error no workflow named (disk full, permission, read-only)
    if e.errno not in outdir.WRITE_ERRNOS:
      raise
    print(f'error: {e.filename or "output"}: cannot write: {e.strerror}', file=sys.stderr)
    return 2


if __name__ == '__main__':
  sys.exit(main())
