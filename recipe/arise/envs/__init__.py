"""Multi-turn text environments for ``arise_env_agent`` (issue 42; docs/environments.md).

:mod:`recipe.arise.envs.base` is the interface a user implements to bring an environment; the
adapters of the supported ones are registered by name in :data:`recipe.arise.envs.base.ENVS` and
imported only when used (their packages are the ``envs`` extra)."""
