"""Console pages, Channels consumers, templates and static assets."""
