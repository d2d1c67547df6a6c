"""trajkit.models."""
