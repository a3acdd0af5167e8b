"""Price book, usage ledger, spend rollups, budgets, alerts and break-even."""
