"""Where the toolkit caches what it computes once per machine (file digests, the model-type catalog)."""

from __future__ import annotations

import os
from pathlib import Path

from platformdirs import user_cache_dir


def cache_dir() -> Path:
    """Return the cache directory: $INTERPRET_CACHE_DIR if set, else the user's cache dir for the toolkit."""
    return Path(os.environ.get("INTERPRET_CACHE_DIR") or user_cache_dir("transformer-audit"))
