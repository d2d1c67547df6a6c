"""trajkit.eval."""
