"""Install a plugin the way pip would, without pip: a module and a dist-info with its entry points, on sys.path.

`importlib.metadata` finds the distribution on sys.path exactly as it finds an installed wheel, so the
registries discover the plugin through the same entry-point machinery a user's `pip install` feeds.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from interpret.analysis import registry


def install_plugin(root: Path, dist: str, module: str, source: str, entries: dict[str, str], group: str) -> None:
    """Write `module`.py holding `source` and the dist-info of `dist` whose `group` entry points are `entries`."""
    (root / f"{module}.py").write_text(source, encoding="utf-8")
    info = root / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    lines = "\n".join(f"{name} = {target}" for name, target in entries.items())
    (info / "entry_points.txt").write_text(f"[{group}]\n{lines}\n")


@contextmanager
def plugin_site(root: Path, *modules: str) -> Iterator[Path]:
    """Yield `root` while it is on sys.path with the analyzer registry refreshed; forget `modules` after."""
    sys.path.insert(0, str(root))
    registry.refresh()
    try:
        yield root
    finally:
        sys.path.remove(str(root))
        for name in [m for m in sys.modules if m in modules or m.split(".")[0] in modules]:
            del sys.modules[name]
        registry.refresh()
