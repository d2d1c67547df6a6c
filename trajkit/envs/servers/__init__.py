"""trajkit.envs.servers."""
