"""Text on its way in and out: made storable (`sanitize`), showable (`display`), counted
(`tokens`), read as a transcript."""
