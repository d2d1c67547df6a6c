"""trajkit.data_cards."""
