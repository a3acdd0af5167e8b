"""vLLM worker registry, metrics scraping, KV-event index and routing."""
