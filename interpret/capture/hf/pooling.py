"""Where a text tower pools its last hidden states into its text embedding, as each tower's own code does, and
where a dual encoder's vision tower pools its image embedding (`image_pooled_position`).

What a text-image dual encoder's decision reads of the text (`interpret.decision.similarity`), and where a text
tower loaded alone is read; the dual and generic adapters pad a tower that reads its row's last position on the
left. By the text tower's config model type (`TextPooling.rule`):
    "eos"     the first end-of-text token, or the highest token id where the config's eos id is 2
              (CLIPTextTransformer, CLIPSeg, X-CLIP, GroupViT: checkpoints from before transformers#24773)
    "eos_id"  the first end-of-text token (MetaCLIP 2, AIMv2)
    "argmax"  the highest token id, CLIP's original end-of-text rule (OWL-ViT, OWLv2)
    "final"   the last position of the padded row (SigLIP, SigLIP 2: trained on rows padded to a fixed length)
    "first"   the first token (AltCLIP, Chinese-CLIP, BLIP; a BERT-style pooler)
A row without the end-of-text token reads position 0 under "eos"/"eos_id", as the towers' `argmax` over an
all-false row does. CLIP's text tower is causal, so reading it at the first token, as an encoder classifier
would be read, explains nothing: that row sees only itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from interpret.errors import UnsupportedModelError

Rule = Literal["eos", "eos_id", "argmax", "final", "first"]

# The text tower's config model type -> how it pools (read from each tower's `forward` in transformers).
TEXT_POOLING: dict[str, Rule] = {
    "clip_text_model": "eos",
    "clipseg_text_model": "eos",
    "xclip_text_model": "eos",
    "groupvit_text_model": "eos",
    "metaclip_2_text_model": "eos_id",
    "aimv2_text_model": "eos_id",
    "owlvit_text_model": "argmax",
    "owlv2_text_model": "argmax",
    "siglip_text_model": "final",
    "siglip2_text_model": "final",
    "altclip_text_model": "first",
    "chinese_clip_text_model": "first",
    "blip_text_model": "first",
}


@dataclass(frozen=True)
class TextPooling:
    """Where a text tower pools its last hidden states: `rule` (see the module docstring) and the end-of-text
    token id its config names (None where the rule reads none)."""

    rule: Rule
    eos: int | None = None

    @property
    def padding_side(self) -> Literal["left"] | None:
        """Where the tower's texts are padded: on the left where it reads its row's last position ("final"), so that
        it reads each text's last token; None (as the tokenizer pads) otherwise."""
        return "left" if self.rule == "final" else None

    def position(self, input_ids: Tensor | None, attention_mask: Tensor) -> int:
        """Return the position one row is pooled at (`input_ids` / `attention_mask`: [pos])."""
        if self.rule == "final":
            return int(attention_mask.shape[-1]) - 1
        if self.rule == "first" or input_ids is None:
            real = torch.nonzero(attention_mask != 0).flatten()
            return int(real[0]) if len(real) else 0
        if self.rule == "argmax" or (self.rule == "eos" and self.eos == 2):
            return int(input_ids.to(torch.int).argmax())
        return int((input_ids == self.eos).to(torch.int).argmax())


def text_pooling(model: nn.Module, paired: bool) -> TextPooling | None:
    """Return how `model`'s text tower pools: a text tower loaded alone (CLIPTextModel: its own config), or,
    when `paired` (its output holds `logits_per_text`), a dual encoder's (its `text_config`); None otherwise.

    A vision-text dual encoder assembled from a text model of another type reads that model's pooler output,
    which a BERT-style pooler takes from the first token; one whose text model has no pooler is refused.
    """
    config = getattr(model, "config", None)
    own = getattr(config, "model_type", None)
    text = config if own in TEXT_POOLING else getattr(config, "text_config", None) if paired else None
    if text is None:
        return None
    rule = TEXT_POOLING.get(getattr(text, "model_type", ""))
    if rule is None:
        if getattr(getattr(model, "text_model", None), "pooler", None) is None:
            raise UnsupportedModelError(
                f"the text tower of {type(model).__name__} ({getattr(text, 'model_type', '?')}) has no pooler whose"
                " position interpret knows; load a dual encoder whose text tower is a known one (CLIP, SigLIP, BERT)."
            )
        rule = "first"
    eos = getattr(text, "eos_token_id", None)
    return TextPooling(rule, int(eos) if isinstance(eos, int) else None)


# The vision tower's config model type -> the position its pooled output reads: the class token (each tower's
# `post_layernorm(last_hidden_state[:, 0])`, ViT's pooler); SigLIP's, SigLIP 2's and AIMv2's towers pool with an
# attention head (a learned query over every patch) that no position stands for, so they have none here.
VISION_CLASS_TOKEN = frozenset({
    "clip_vision_model", "clipseg_vision_model", "metaclip_2_vision_model", "owlvit_vision_model",
    "owlv2_vision_model", "altclip_vision_model", "chinese_clip_vision_model", "blip_vision_model", "vit",
})


def image_pooled_position(model: nn.Module) -> int | None:
    """Return the position of a dual encoder's vision tower that its image embedding reads (0: the class token),
    or None where the tower pools otherwise (an attention head) or the model is no dual encoder."""
    vision = getattr(getattr(model, "config", None), "vision_config", None)
    return 0 if getattr(vision, "model_type", None) in VISION_CLASS_TOKEN else None

