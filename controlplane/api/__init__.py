"""API plumbing shared by every app: one error shape, one pagination style."""
