"""trajkit.synth."""
