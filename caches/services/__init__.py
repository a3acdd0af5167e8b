"""Cache lifecycle services; see the topic modules."""
