"""Versions of the toolkit and the libraries that shape its numbers, for trace and report metadata."""

from __future__ import annotations

from functools import cache
from importlib import metadata

DISTRIBUTION = "transformer-audit"


def package_version() -> str:
    """Return this toolkit's installed version, read from package metadata."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "0+unknown"


@cache
def library_versions() -> dict[str, str]:
    """Return {name: version} for the toolkit, python, torch, transformers and numpy."""
    import platform

    versions = {"transformer-audit": package_version(), "python": platform.python_version()}
    for name in ("torch", "transformers", "numpy", "captum"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions
