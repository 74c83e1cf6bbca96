"""Process plumbing every part shares: the scheduler, health and metrics, secrets kept out
of logs."""
