"""Settings: config.yaml (`yaml_loader`), the environment over it (`env`), typed sections
(`settings`), and `mnemo config` (`show`)."""
