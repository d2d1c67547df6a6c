"""trajkit.data_cards: the dataset card of a run (``card.py``: stats, plots, provenance) and the Hub push (``push.py``)."""
