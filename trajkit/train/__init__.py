"""trajkit.train."""
