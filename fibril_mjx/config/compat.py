"""Old import paths (before the package was cut into layers) kept working for a release.

`import fibril_mjx.simulator` still gives `fibril_mjx.batch.simulation` (the same module object,
so `isinstance` and monkeypatching agree), with a `DeprecationWarning` naming the new path. The
aliases are resolved by a finder on `sys.meta_path`, installed by `fibril_mjx/__init__.py`;
no file is left at an old path.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

MOVED = {
    'fibril_mjx._mjx': 'fibril_mjx.physics.mjx',
    'fibril_mjx.assemblies': 'fibril_mjx.physics.assemblies',
    'fibril_mjx.bags': 'fibril_mjx.io.bags',
    'fibril_mjx.build': 'fibril_mjx.builder.build',
    'fibril_mjx.campaign': 'fibril_mjx.workflows.campaign',
    'fibril_mjx.campaign.engine': 'fibril_mjx.workflows.campaign.engine',
    'fibril_mjx.campaign.execute': 'fibril_mjx.workflows.campaign.execute',
    'fibril_mjx.campaign.fields': 'fibril_mjx.workflows.campaign.fields',
    'fibril_mjx.campaign.report': 'fibril_mjx.workflows.campaign.report',
    'fibril_mjx.campaign.spec': 'fibril_mjx.workflows.campaign.spec',
    'fibril_mjx.command_script': 'fibril_mjx.core.command_script',
    'fibril_mjx.components.actuation': 'fibril_mjx.components.actuators.actuation',
    'fibril_mjx.components.ahrs': 'fibril_mjx.components.sensors.ahrs',
    'fibril_mjx.components.airspeed': 'fibril_mjx.components.sensors.airspeed',
    'fibril_mjx.components.attitude_ekf': 'fibril_mjx.components.estimators.attitude_ekf',
    'fibril_mjx.components.barometer': 'fibril_mjx.components.sensors.barometer',
    'fibril_mjx.components.camera': 'fibril_mjx.components.sensors.camera',
    'fibril_mjx.components.gnss': 'fibril_mjx.components.sensors.gnss',
    'fibril_mjx.components.imu': 'fibril_mjx.components.sensors.imu',
    'fibril_mjx.components.inertial': 'fibril_mjx.components.sensors.inertial',
    'fibril_mjx.components.lidar': 'fibril_mjx.components.sensors.lidar',
    'fibril_mjx.components.magnetometer': 'fibril_mjx.components.sensors.magnetometer',
    'fibril_mjx.components.motion_motor': 'fibril_mjx.components.actuators.motion_motor',
    'fibril_mjx.components.motor': 'fibril_mjx.components.actuators.motor',
    'fibril_mjx.components.optical_flow': 'fibril_mjx.components.sensors.optical_flow',
    'fibril_mjx.components.protocol': 'fibril_mjx.core.protocol',
    'fibril_mjx.components.rangefinder': 'fibril_mjx.components.sensors.rangefinder',
    'fibril_mjx.components.scalar_actuator': 'fibril_mjx.components.actuators.scalar_actuator',
    'fibril_mjx.components.scene': 'fibril_mjx.components.sensors.scene',
    'fibril_mjx.components.thermal': 'fibril_mjx.components.sensors.thermal',
    'fibril_mjx.components.vibration': 'fibril_mjx.components.sensors.vibration',
    'fibril_mjx.dcmotor': 'fibril_mjx.physics.dcmotor',
    'fibril_mjx.dcmotor.mjx_step': 'fibril_mjx.physics.dcmotor.mjx_step',
    'fibril_mjx.dcmotor.model': 'fibril_mjx.physics.dcmotor.model',
    'fibril_mjx.dcmotor.twin': 'fibril_mjx.physics.dcmotor.twin',
    'fibril_mjx.envs': 'fibril_mjx.rl.env',
    'fibril_mjx.estimators': 'fibril_mjx.mechanisms.estimators',
    'fibril_mjx.faults': 'fibril_mjx.mechanisms.faults',
    'fibril_mjx.fit_profile': 'fibril_mjx.workflows.fit_profile',
    'fibril_mjx.geodesy': 'fibril_mjx.mechanisms.geodesy',
    'fibril_mjx.icm42688p': 'fibril_mjx.io.icm42688p',
    'fibril_mjx.manifest': 'fibril_mjx.config.manifest',
    'fibril_mjx.mavlink_hil': 'fibril_mjx.io.mavlink_hil',
    'fibril_mjx.mcap_export': 'fibril_mjx.io.mcap_export',
    'fibril_mjx.overrides': 'fibril_mjx.config.overrides',
    'fibril_mjx.paths': 'fibril_mjx.config.paths',
    'fibril_mjx.plan': 'fibril_mjx.workflows.plan',
    'fibril_mjx.profiles_cli': 'fibril_mjx.workflows.profiles',
    'fibril_mjx.quat': 'fibril_mjx.mechanisms.quat',
    'fibril_mjx.recording': 'fibril_mjx.io.recording',
    'fibril_mjx.replay': 'fibril_mjx.workflows.replay',
    'fibril_mjx.rng': 'fibril_mjx.mechanisms.rng',
    'fibril_mjx.runner': 'fibril_mjx.workflows.run',
    'fibril_mjx.schedule': 'fibril_mjx.mechanisms.schedule',
    'fibril_mjx.schema': 'fibril_mjx.workflows.schema',
    'fibril_mjx.signal': 'fibril_mjx.mechanisms.signal',
    'fibril_mjx.simulator': 'fibril_mjx.batch.simulation',
    'fibril_mjx.smallmat': 'fibril_mjx.mechanisms.smallmat',
    'fibril_mjx.stats': 'fibril_mjx.analysis.stats',
    'fibril_mjx.transport': 'fibril_mjx.mechanisms.transport',
    'fibril_mjx.tune': 'fibril_mjx.workflows.tune',
    'fibril_mjx.validate': 'fibril_mjx.workflows.validate',
    'fibril_mjx.validate.common': 'fibril_mjx.workflows.validate.common',
    'fibril_mjx.validate.extero': 'fibril_mjx.workflows.validate.extero',
    'fibril_mjx.validate.gnss': 'fibril_mjx.workflows.validate.gnss',
    'fibril_mjx.validate.inertial': 'fibril_mjx.workflows.validate.inertial',
    'fibril_mjx.validate.nav': 'fibril_mjx.workflows.validate.nav',
    'fibril_mjx.validate.thermal': 'fibril_mjx.workflows.validate.thermal',
    'fibril_mjx.validation': 'fibril_mjx.config.validation',
    'fibril_mjx.worlds': 'fibril_mjx.batch.worlds',
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
  """Finds an old module path and loads the module at its new one."""

  def find_spec(self, name, path=None, target=None):
    if name in MOVED:
      return importlib.util.spec_from_loader(name, self)
    return None

  def create_module(self, spec):
    warnings.warn(f'{spec.name} moved to {MOVED[spec.name]}; the old path goes in a later '
                  'release', DeprecationWarning, stacklevel=2)
    return importlib.import_module(MOVED[spec.name])

  def exec_module(self, module):
    pass


def install() -> None:
  if not any(isinstance(f, _Alias) for f in sys.meta_path):
    sys.meta_path.insert(0, _Alias())   # before the path finder: an old subpackage path would
    # otherwise be found again under its aliased parent and loaded a second time
