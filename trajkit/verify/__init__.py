"""trajkit.verify."""
