"""Fixtures the models tests share with the synth tests: the scripted model, the calculator, a clean run."""

from tests.synth.conftest import brain, calculator_rows, clean_pipeline, model_server  # noqa: F401 (fixtures)
