"""The composition root: settings and database in, running services out (`services`),
started and stopped in order (`root`)."""
