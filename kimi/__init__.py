"""Kimi K2.6, named once: the model name, its renderer, and an offline tokenizer.

Everything that names the model or builds its renderer (the backend, the local stack,
its base-model build, the benchmarks and the tests) imports it from here. It is a package
of its own, beside `helpers` and `local_stack`, so that neither imports the other for it.

`get_tokenizer("moonshotai/Kimi-K2.6")` downloads tokenizer code from the Hugging Face
hub. The `tml-renderers` package ships the same vocabulary as a native tokenizer, so
the local backend wraps it in the small surface the cookbook's renderers use and
registers it under the real model name. Every token id is a real Kimi K2.6 id.
The SDK imports sit inside the functions, so importing the names is cheap.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

MODEL_NAME = "moonshotai/Kimi-K2.6"
RENDERER_NAME = "kimi_k26"  # tinker-cookbook's renderer for Kimi K2.6's chat template


def kimi_renderer(tokenizer: Any) -> Any:
    """The cookbook's Kimi K2.6 renderer (chat template, stop sequences) on `tokenizer`."""
    from tinker_cookbook import renderers

    return renderers.get_renderer(RENDERER_NAME, tokenizer=tokenizer)


def offline_kimi_renderer() -> Any:
    """The real renderer on the offline tokenizer, without the hub."""
    from tinker_cookbook.tokenizer_utils import get_tokenizer

    register_offline_kimi_tokenizer()
    return kimi_renderer(get_tokenizer(MODEL_NAME))


class OfflineKimiTokenizer:
    """Kimi K2.6 tokens without the hub: `encode`, `decode` and the special-token names.

    Special tokens such as `<|im_end|>` and `<think>` must encode as single ids
    (the renderer's stop sequence depends on it), so text is split on them first.
    """

    name_or_path = MODEL_NAME

    def __init__(self) -> None:
        from tml_renderers.tokenizers import KimiK26Tokenizer

        self._native = KimiK26Tokenizer()
        self._specials = set(self._native.all_special_tokens)
        longest_first = sorted(self._specials, key=len, reverse=True)
        self._split = re.compile("(" + "|".join(map(re.escape, longest_first)) + ")")
        self.bos_token = self._native.bos_token
        self.eos_token = self._native.eos_token
        self.eos_token_id = self._native.encode_special(self.eos_token)

    def encode(self, text: str, add_special_tokens: bool = False, **_: object) -> list[int]:
        ids: list[int] = []
        for piece in self._split.split(text):
            if piece in self._specials:
                ids.append(self._native.encode_special(piece))
            elif piece:
                ids.extend(self._native.encode_ordinary(piece))
        return ids

    def decode(self, token_ids: Sequence[int], **_: object) -> str:
        return self._native.decode(list(token_ids))


@functools.cache
def offline_kimi_tokenizer() -> OfflineKimiTokenizer:
    """One shared tokenizer per process (building the native one takes a moment)."""
    return OfflineKimiTokenizer()


def register_offline_kimi_tokenizer() -> None:
    """Make `get_tokenizer("moonshotai/Kimi-K2.6")` return the offline tokenizer."""
    from tinker_cookbook.tokenizer_utils import register_tokenizer

    register_tokenizer(MODEL_NAME, offline_kimi_tokenizer)
