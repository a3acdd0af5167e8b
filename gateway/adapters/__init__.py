"""Provider adapters behind one interface (``gateway.adapters.base.Adapter``)."""
