"""`mnemo memory ...`: the operator's commands over a live database, one module per command
group."""
