"""Append-only, hash-chained audit events; signed export and verification."""
