"""Background jobs of a running bot: reflect and retention, on the root's scheduler."""
