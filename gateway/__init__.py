"""The OpenAI-compatible data plane."""
