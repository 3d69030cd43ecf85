"""A dual encoder's report in headless Chromium: the image's relevance is drawn over its class token and patches,
each chip labelled with its patch and coloured by the value the result holds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hf_tiny import IMAGE_SIZE, PATCH_SIZE, collect_args, tiny_model, word_tokenizer
from report_chromium import Chromium
from test_report_tokens_browser import open_report, view_strip

import interpret

pytestmark = pytest.mark.browser
TITLE = "Gradient-weighted rollout over the image, from its class token"


def test_the_image_relevance_is_a_strip_over_the_class_token_and_patches(browser: Chromium, tmp_path: Path) -> None:
    model, tokenizer = tiny_model("clip", "eager"), word_tokenizer()
    inputs, _ = collect_args("clip")
    report = interpret.explain(model, tokenizer, inputs, analyzers=["gradient_weighted_rollout"], evidence=False)
    result = report.results[0]
    path = tmp_path / "report.html"
    report.render(path)
    page = open_report(browser, path)
    texts = view_strip(page, TITLE, "chips.map(c => c.textContent)")
    grid = IMAGE_SIZE // PATCH_SIZE
    assert texts == ["[CLS]", *(f"patch_{row}_{column}" for row in range(grid) for column in range(grid))]
    titles = view_strip(page, TITLE, "chips.map(c => c.title)")
    assert titles[1].startswith("patch_0_0 [1]: ") and titles[0].endswith("(special token)")
    values = [float(title.split(": ")[1].split(" ")[0]) for title in titles]  # as the page writes them: 4 digits
    np.testing.assert_allclose(values, result["image_readout"][0], rtol=5e-4)
