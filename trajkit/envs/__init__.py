"""trajkit.envs."""
