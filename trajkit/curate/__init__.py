"""trajkit.curate."""
