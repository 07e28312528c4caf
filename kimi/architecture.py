"""Kimi K2.6's shape, as far as the course can know it offline, and the LoRA tensors Tinker
and the cookbook's converter make for a model of that shape.

Kimi K2.6's `config.json` is on the Hugging Face hub, which this machine cannot reach. What is
known here, and where from:
- `vocab_size`: the offline tokenizer (`tml-renderers`): its highest token id is 163,839;
- `hidden_size` 7,168: tinker-cookbook's `hyperparam_utils` (its table of hidden sizes);
- layers, experts and projection sizes: the published Kimi K2 architecture (61 layers, the
  first dense with an 18,432-wide MLP, then 384 routed experts and 1 shared expert, each
  2,048 wide; multi-head latent attention with a 1,536-rank query and a 512-rank key/value
  compression, 64 heads, 64 rotary and 128 value dimensions per head), as NVIDIA's Megatron
  Bridge documents it for Kimi K2 (docs.nvidia.com/nemo/megatron-bridge, `KimiK2Provider`).
  K2.6 keeps K2's text backbone; the check that holds this: from these numbers,
  `tinker_lora_shapes` gives exactly the per-rank parameter counts the cookbook bakes in for
  Kimi K2.6 (`get_lora_param_count`), component by component (tests/course/test_kimi_export.py).

Tinker's layout of an expert layer (cookbook `get_lora_param_count`'s note, and the converter
`weights/_adapter.py`): one 3-D tensor per projection for all experts, and the factor on the
model's hidden side is shared by every expert (leading size 1): w1 and w3 (hidden -> expert
width) share `lora_A`, w2 (expert width -> hidden) shares `lora_B`. The converter
(`build_lora_adapter`) writes one 2-D pair per expert, copying the shared factor into each.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "base_model.model.model.layers"


@dataclass(frozen=True)
class MoeArchitecture:
    """A Kimi K2-family (DeepSeek V3-style) decoder: what sizes its LoRA."""

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    first_k_dense_replace: int  # the first layers have a dense MLP, the rest experts
    intermediate_size: int  # the dense MLP's width
    moe_intermediate_size: int  # each expert's width
    n_routed_experts: int
    n_shared_experts: int
    q_lora_rank: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    v_head_dim: int
    num_attention_heads: int

    def hf_config(self, model_type: str = "kimi_k2") -> dict:
        """A `config.json` for the converter: it reads the model type to pick its rules."""
        return {
            "architectures": ["DeepseekV3ForCausalLM"],
            "model_type": model_type,
            "tie_word_embeddings": False,
            **{name: getattr(self, name) for name in self.__dataclass_fields__},
        }


def offline_vocab_size() -> int:
    """Kimi K2.6's vocabulary, from the offline tokenizer: its highest id, plus one."""
    from tml_renderers.tokenizers import KimiK26Tokenizer

    tokenizer = KimiK26Tokenizer()
    return 1 + max(tokenizer.encode_special(name) for name in tokenizer.special_tokens())


KIMI_K26 = MoeArchitecture(
    vocab_size=163_840,  # offline_vocab_size(); a test holds the two equal
    hidden_size=7168,
    num_hidden_layers=61,
    first_k_dense_replace=1,
    intermediate_size=18_432,
    moe_intermediate_size=2048,
    n_routed_experts=384,
    n_shared_experts=1,
    q_lora_rank=1536,
    kv_lora_rank=512,
    qk_rope_head_dim=64,
    v_head_dim=128,
    num_attention_heads=64,
)

# The same structure, small enough to build for real: the local stack's mixture-of-experts
# archive mode (`local_stack/engine/tinker_layout.py`) writes an adapter of this shape.
TINY_MOE = MoeArchitecture(
    vocab_size=96,
    hidden_size=32,
    num_hidden_layers=3,
    first_k_dense_replace=1,
    intermediate_size=48,
    moe_intermediate_size=16,
    n_routed_experts=8,
    n_shared_experts=1,
    q_lora_rank=24,
    kv_lora_rank=16,
    qk_rope_head_dim=8,
    v_head_dim=8,
    num_attention_heads=4,
)


def _pair(name: str, in_features: int, out_features: int, rank: int) -> dict:
    """One 2-D LoRA: A (r x in) and B (out x r)."""
    a, b = f"{name}.lora_A.weight", f"{name}.lora_B.weight"
    return {a: (rank, in_features), b: (out_features, rank)}


def tinker_lora_shapes(arch: MoeArchitecture, rank: int) -> dict[str, tuple[int, ...]]:
    """Every tensor of a Tinker archive of `arch` at `rank` (MLP, attention and unembedding
    all trained, Tinker's default), by its name in Tinker's layout."""
    hidden = arch.hidden_size
    shapes: dict[str, tuple[int, ...]] = {}
    for layer in range(arch.num_hidden_layers):
        at = f"{PREFIX}.{layer}"
        # Attention: the projections Tinker adapts (cookbook table: q_a, kv_a_with_mqa, o).
        shapes |= _pair(f"{at}.self_attn.q_a_proj", hidden, arch.q_lora_rank, rank)
        kv_a_out = arch.kv_lora_rank + arch.qk_rope_head_dim
        shapes |= _pair(f"{at}.self_attn.kv_a_proj_with_mqa", hidden, kv_a_out, rank)
        o_in = arch.num_attention_heads * arch.v_head_dim
        shapes |= _pair(f"{at}.self_attn.o_proj", o_in, hidden, rank)
        if layer < arch.first_k_dense_replace:
            dense, width = f"{at}.mlp", arch.intermediate_size
        else:
            dense, width = f"{at}.mlp.shared_experts", arch.moe_intermediate_size
            width *= arch.n_shared_experts
            experts, inner = arch.n_routed_experts, arch.moe_intermediate_size
            for up in ("w1", "w3"):  # hidden -> expert width: lora_A is shared
                shapes[f"{at}.mlp.experts.{up}.lora_A.weight"] = (1, rank, hidden)
                shapes[f"{at}.mlp.experts.{up}.lora_B.weight"] = (experts, inner, rank)
            shapes[f"{at}.mlp.experts.w2.lora_A.weight"] = (experts, rank, inner)
            shapes[f"{at}.mlp.experts.w2.lora_B.weight"] = (1, hidden, rank)  # shared
        shapes |= _pair(f"{dense}.gate_proj", hidden, width, rank)
        shapes |= _pair(f"{dense}.up_proj", hidden, width, rank)
        shapes |= _pair(f"{dense}.down_proj", width, hidden, rank)
    shapes |= _pair("base_model.model.model.unembed_tokens", hidden, arch.vocab_size, rank)
    return shapes


def hf_weight_names(arch: MoeArchitecture) -> list[str]:
    """The base model's weight names that the converter maps the adapter onto."""
    names = ["model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"]
    for layer in range(arch.num_hidden_layers):
        at = f"model.layers.{layer}"
        names += [
            f"{at}.self_attn.{m}.weight" for m in ("q_a_proj", "kv_a_proj_with_mqa", "o_proj")
        ]
        names += [f"{at}.self_attn.{m}.weight" for m in ("q_b_proj", "kv_b_proj")]
        projections = ("gate_proj", "up_proj", "down_proj")
        if layer < arch.first_k_dense_replace:
            names += [f"{at}.mlp.{p}.weight" for p in projections]
            continue
        names += [f"{at}.mlp.shared_experts.{p}.weight" for p in projections]
        names += [
            f"{at}.mlp.experts.{e}.{p}.weight"
            for e in range(arch.n_routed_experts)
            for p in projections
        ]
    return names
