"""trajkit: post-training data for tool-using LLM agents, and training on it."""

__version__ = "0.1.0"
