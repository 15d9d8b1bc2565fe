"""Component types by manifest `type`."""

from fibril_mjx.components import ahrs

REGISTRY = {
    ahrs.TYPE: ahrs.build,
}
