"""Export and import of a session, lossless, with the schema checked whole and integrity
checks for `mnemo memory doctor`."""
