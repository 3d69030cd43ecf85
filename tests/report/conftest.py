"""The report tests' shared browser: one headless Chromium per test module (skipped where none is installed)."""

from __future__ import annotations

import pytest
from report_chromium import Chromium, find_chromium

CHROMIUM = find_chromium()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory):
    if CHROMIUM is None:
        pytest.skip("no Chromium at /usr/bin/chromium (apt-get install chromium; .ci/run installs it)")
    with Chromium(CHROMIUM, tmp_path_factory.mktemp("chromium-profile")) as chromium:
        yield chromium
