"""The component contract (roles, protocols, the build context) and the pieces every component
and the pipeline share."""
