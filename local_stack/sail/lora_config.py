"""What a LoRA's adapter_config.json may say, checked before PEFT sees any of it.

Every config the stack is given passes here first: a Tinker archive's own (`r` and
`lora_alpha`, `check_tinker_config`), a sampling request's `tinker_adapter_config` and an
uploaded LoRA's (`check_lora_config`, an allow-list of keys and ranges), and the two must
agree (`check_given_config`). Applying the checked config is `adapters.apply_adapter`'s job.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from local_stack.engine.model import ADAPTER_CONFIG_PATH
from local_stack.http import ApiError, strict_json
from local_stack.sail.requests import is_finite_number

Check = Callable[[Any], bool]

MAX_LORA_RANK = 32  # what Sail accepts for Kimi K2.6
MAX_CONFIG_BYTES = 64 * 1024
# The modules the stack trains; an adapter may target any of them, nothing else.
TARGET_MODULES = frozenset(json.loads(ADAPTER_CONFIG_PATH.read_text())["target_modules"])
# PEFT matches module names, pattern keys and layer patterns as regular expressions, so a
# client's pattern could backtrack for ever while holding the interpreter lock (a
# `{"(.|.)*X": 8}` rank_pattern froze the whole stack). Only plain, dotted module names.
PLAIN_NAME = re.compile(r"[A-Za-z0-9_]{1,64}(\.[A-Za-z0-9_]{1,64}){0,7}")
MAX_PATTERN_ENTRIES = 64
MAX_LAYER_INDEX = 1023
LORA_PARAM = "metadata.lora"
CONFIG_PARAM = "metadata.tinker_adapter_config"
# Codes an uploaded LoRA's failed validation reports (`result_code`).
INVALID_CONFIG = "invalid_adapter_config"
INVALID_RANK = "invalid_rank"


def check_tinker_config(config: Any) -> None:
    """A Tinker archive's config: `r` and `lora_alpha`, and any other key one PEFT writes, each
    in the range `check_lora_config` accepts."""

    def refuse(problem: str, code: str = INVALID_CONFIG) -> ApiError:
        return ApiError(
            f"the LoRA archive's adapter_config.json {problem}", param=LORA_PARAM, code=code
        )

    if not isinstance(config, dict) or "r" not in config or "lora_alpha" not in config:
        raise refuse("must be an object with r and lora_alpha (Tinker's layout)")
    _check_known_keys(config, refuse)
    _check_values(config, refuse)


def parse_adapter_config(raw: bytes, param: str = LORA_PARAM) -> dict[str, Any]:
    """An adapter_config.json's bytes, parsed and checked (`check_lora_config`), or a 4xx
    naming `param`. Errors carry a `code`: uploaded LoRAs report it when validation fails."""
    config = parse_config_json(raw, param)
    check_lora_config(config, param)
    return config


def parse_config_json(raw: bytes, param: str) -> Any:
    """An adapter_config.json's bytes parsed, or a 4xx naming `param`."""
    if len(raw) > MAX_CONFIG_BYTES:
        raise ApiError(
            f"adapter_config.json is over {MAX_CONFIG_BYTES} bytes",
            param=param,
            code=INVALID_CONFIG,
        )
    try:
        config = strict_json(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ApiError(
            "adapter_config.json is not UTF-8", param=param, code=INVALID_CONFIG
        ) from None
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ApiError(
            f"adapter_config.json is not JSON: {exc}", param=param, code=INVALID_CONFIG
        ) from None
    return config


def _plain_names(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) <= MAX_PATTERN_ENTRIES
        and all(isinstance(name, str) and PLAIN_NAME.fullmatch(name) for name in value)
    )


def _pattern(check_value: Check) -> Check:
    """A rank_pattern or alpha_pattern: plain module names to checked values."""
    return lambda value: (
        isinstance(value, dict)
        and _plain_names(list(value))
        and all(check_value(v) for v in value.values())
    )


def _is_off(value: Any) -> bool:
    """An option left at PEFT's default off value (None, false or empty)."""
    return value is None or value is False or value == [] or value == {}


def _is_text(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= 256


def _is_rank(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_LORA_RANK


def _is_layer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_LAYER_INDEX


RANK_RULE = f"ranks must be integers from 1 to {MAX_LORA_RANK}"
PLAIN_RULE = f"a list of at most {MAX_PATTERN_ENTRIES} plain module names (no patterns)"
# Every key PEFT writes into a LoRA's adapter_config.json: how its value is checked, and
# what the refusal says is accepted. A key not listed here is refused.
KNOWN_KEYS: dict[str, tuple[Check, str]] = {
    "peft_type": (lambda v: v == "LORA", "'LORA'"),
    "task_type": (lambda v: v in ("CAUSAL_LM", None), "'CAUSAL_LM'"),
    "base_model_name_or_path": (lambda v: v is None or _is_text(v), "a model id"),
    "revision": (lambda v: v is None or _is_text(v), "null or a revision"),
    "peft_version": (lambda v: v is None or _is_text(v), "null or a version"),
    "auto_mapping": (_is_off, "null"),
    "inference_mode": (lambda v: isinstance(v, bool), "true or false"),
    "r": (_is_rank, RANK_RULE),
    "lora_alpha": (is_finite_number, "a finite number"),
    "lora_dropout": (lambda v: is_finite_number(v) and 0 <= v < 1, "a number from 0 to below 1"),
    "target_modules": (
        lambda v: isinstance(v, list) and bool(v) and set(v) <= TARGET_MODULES,
        f"a non-empty list of {sorted(TARGET_MODULES)}",
    ),
    "exclude_modules": (lambda v: v is None or _plain_names(v), f"null or {PLAIN_RULE}"),
    "rank_pattern": (_pattern(_is_rank), "plain module names (no patterns) mapped to ranks"),
    "alpha_pattern": (
        _pattern(is_finite_number),
        "plain module names (no patterns) mapped to finite numbers",
    ),
    "layers_to_transform": (
        lambda v: v is None or _is_layer(v) or (isinstance(v, list) and all(map(_is_layer, v))),
        f"null, or layer indices from 0 to {MAX_LAYER_INDEX}",
    ),
    "layers_pattern": (
        lambda v: v is None or _plain_names(v if isinstance(v, list) else [v]),
        f"null, a plain module name or {PLAIN_RULE}",
    ),
    # Only initialisations that cost one cheap pass over the weights (which loading then
    # overwrites). PiSSA, OLoRA, LoftQ, CorDA, EVA and the rest run SVDs or data passes:
    # one `"pissa_niter_100000000"` blocked the compute thread for good.
    "init_lora_weights": (
        lambda v: v is True or v is False or v == "gaussian",
        "true, false or 'gaussian'",
    ),
    "fan_in_fan_out": (lambda v: isinstance(v, bool), "true or false"),
    "use_rslora": (lambda v: isinstance(v, bool), "true or false"),
    "bias": (lambda v: v == "none", "'none'"),
    "megatron_core": (lambda v: v in (None, "megatron.core"), "'megatron.core'"),
    "qalora_group_size": (
        lambda v: isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1024,
        "an integer from 1 to 1024",
    ),
    # Options Tinker never writes, off: most add modules or copy layers before any check
    # (a layer_replication can ask for a thousand layers), or run long initialisations.
    **{
        key: (_is_off, "null or false (Sail does not serve it)")
        for key in (
            "modules_to_save",
            "layer_replication",
            "trainable_token_indices",
            "target_parameters",
            "use_dora",
            "lora_bias",
            "use_qalora",
            "use_bdlora",
            "ensure_weight_tying",
            "megatron_config",
            "loftq_config",
            "eva_config",
            "corda_config",
            "lora_ga_config",
            "velora_config",
            "monteclora_config",
            "arrow_config",
            "kasa_config",
            "alora_invocation_tokens",
        )
    },
}
REQUIRED_KEYS = ("peft_type", "r", "lora_alpha", "target_modules")


def check_lora_config(config: Any, param: str = LORA_PARAM) -> None:
    """Refuse an adapter config unless every key is one PEFT writes for a LoRA and every
    value is one the stack accepts for it (`KNOWN_KEYS`), before PEFT sees any of it."""

    def refuse(problem: str, code: str = INVALID_CONFIG) -> ApiError:
        return ApiError(f"the adapter's adapter_config.json {problem}", param=param, code=code)

    if not isinstance(config, dict):
        raise refuse("is not a JSON object")
    if config.get("peft_type") != "LORA" or config.get("task_type", "CAUSAL_LM") != "CAUSAL_LM":
        raise refuse("must be a LORA adapter for CAUSAL_LM")
    _check_known_keys(config, refuse)
    missing = [key for key in REQUIRED_KEYS if key not in config]
    if missing:
        raise refuse(f"lacks {missing}")
    _check_values(config, refuse)


def _check_known_keys(config: dict[str, Any], refuse: Callable[..., ApiError]) -> None:
    unknown = sorted(set(config) - set(KNOWN_KEYS))
    if unknown:
        raise refuse(
            f"has keys the local stack does not know, {str(unknown)[:200]}: it accepts only "
            "the keys PEFT writes for a LoRA adapter"
        )


def _check_values(config: dict[str, Any], refuse: Callable[..., ApiError]) -> None:
    """Ranks first (what PEFT would allocate by), then every value by its key's rule."""
    patterns = config.get("rank_pattern") or {}
    ranks = [config["r"], *(patterns.values() if isinstance(patterns, dict) else [])]
    if not all(map(_is_rank, ranks)):
        raise refuse(f"has rank {ranks}; {RANK_RULE}", INVALID_RANK)
    for key, value in config.items():
        accepted, rule = KNOWN_KEYS[key]
        if not accepted(value):
            raise refuse(f"has {key} {_shown(value)}; {key} must be {rule}")


def _shown(value: Any) -> str:
    text = json.dumps(value)  # the config came from JSON
    return text if len(text) <= 120 else text[:117] + "..."


def check_given_keys(given: dict[str, Any]) -> None:
    """A request's `tinker_adapter_config` is only compared with the adapter's own config
    (`check_given_config`), but it too may hold only keys PEFT writes for a LoRA."""
    unknown = sorted(set(given) - set(KNOWN_KEYS))
    if unknown:
        raise ApiError(
            f"tinker_adapter_config has keys the local stack does not know, "
            f"{str(unknown)[:200]}: it accepts only the keys PEFT writes for a LoRA adapter",
            param="metadata.tinker_adapter_config",
        )


def check_given_config(given: dict[str, Any], adapter_config: dict[str, Any]) -> None:
    """Refuse an adapter whose archive config differs from the one the request names.

    Compares every key `given` has; list values compare as sets (PEFT does not keep the
    order of `target_modules`).
    """
    differing = [
        f"{key}: {given[key]!r} != {adapter_config.get(key)!r}"
        for key in sorted(given)
        if _normalized(given[key]) != _normalized(adapter_config.get(key))
    ]
    if differing:
        raise ApiError(
            "tinker_adapter_config does not match the adapter's adapter_config.json "
            f"(given != adapter): {'; '.join(differing)}",
            param=CONFIG_PARAM,
        )


def _normalized(value: Any) -> Any:
    if isinstance(value, list | tuple | set):
        return sorted(map(str, value))
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return float(value)
    return value
