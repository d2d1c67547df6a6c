"""``trajkit view``: a local web app over a run's DuckDB views, and human reviews (its one write)."""
