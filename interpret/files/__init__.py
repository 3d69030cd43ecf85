"""I/O: atomic writes, CSV, content digests, the cache folder and saved traces."""
