"""Cache objects and their lifecycle, TTL policies, providers and reconciliation."""
