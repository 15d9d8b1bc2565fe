"""The component contract (roles, protocols, the build context), the static `Built` a build
produces, and the one-world pipeline over it (`pipeline.init` / `pipeline.step`)."""
