"""Which type each tensor of a model gets in llama.cpp's Q4_K_M mix.

The rules of `llama-quantize ... Q4_K_M` (llama.cpp's src/llama-quant.cpp, as vendored by
llama-cpp-python 0.3.36), written again for the dense architectures the synthetic models use
(no experts, not the 70B special case, no imatrix, no overrides):

- Tensors are visited in llama-quantize's order: tensors outside the blocks first, then block by
  block, each group by name (the loader's `weight_name_comparer`). The counters below follow that
  order.
- Quantized: tensors of two or more dimensions whose name ends in `weight`, except norms, the
  convolutions' taps (`ssm_conv1d`, `shortconv.conv.weight`: Qwen 3.5's and LFM2's), Gemma 4's
  `per_layer_model_proj` and the other exclusions of `tensor_allows_quantization` that these
  architectures never have. Everything else keeps the type the converter gave it
  (`source_type`: F32 for vectors and the convolutions' taps, F16 for the other matrices:
  Gemma 4's `per_layer_model_proj`). The other new kinds of LFM2 and Qwen 3.5 have no rule
  of their own: `shortconv.in_proj` / `out_proj`, `attn_gate`, `ssm_alpha`, `ssm_beta` and
  `ssm_out` are "other" (Q4_K), and Qwen 3.5's delta-net `attn_qkv` is counted with `attn_v`
  (its category is attention-V-like), as llama-quantize does; so is Phi-3's fused `attn_qkv`,
  and Phi-3's fused gate-up `ffn_up` is an `ffn_up` (Q4_K). Gemma 4's per-layer projections
  `inp_gate` and `proj` are "other" (Q4_K).
- `output.weight`, and the token embeddings when there is no `output.weight` (tied
  embeddings): Q8_0 when the row length is not a multiple of 256 (or for Falcon), else Q6_K.
  llama-quantize counts Gemma 4's per-layer token embeddings (`per_layer_token_embd`, one row
  of `n_embd_per_layer` values per layer for each token) as token embeddings: in a tied model
  they are Q6_K too.
- The token embeddings of an untied model: the default, Q4_K.
- `attn_v` (and `attn_qkv` / `attn_kv_b`, counted together): Q6_K where
  `use_more_bits(i, n)` holds for its index among them, else Q4_K (llama.cpp's later Q5_K
  branch for `attn_qkv` is never reached: this attention-V-like branch takes those first).
- `ffn_down`: Q6_K where `use_more_bits(layer, n_layer)` holds (the index is the count of
  `ffn_down` tensors seen, which is the layer for dense models); Falcon has its own rule.
- Everything else quantized: Q4_K.
- Then the fallback for rows that are not a multiple of the type's block: Q4_K -> Q5_0,
  Q5_K -> Q5_1, Q6_K -> Q8_0, and F16 if even that block does not divide the row.

`use_more_bits(i, n)`: `i < n/8 or i >= 7n/8 or (i - n/8) % 3 == 2` (integer divisions): the first
and last eighth of the layers and every third layer between them.
"""

from __future__ import annotations

from dataclasses import dataclass

# ggml block sizes (values per block) of the types the Q4_K_M mix can produce.
BLOCK = {"F32": 1, "F16": 1, "Q4_K": 256, "Q5_K": 256, "Q6_K": 256, "Q5_0": 32, "Q5_1": 32, "Q8_0": 32}
FALLBACK = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}


def use_more_bits(i: int, n: int) -> bool:
    """llama.cpp's choice of the layers that get more bits (`i` < `n`, both >= 0)."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def category(name: str) -> str:
    """The tensor's category, tested in llama.cpp's order (substring matches)."""
    if name == "output.weight":
        return "output"
    if name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return "token_embd"
    for part, cat in (
        ("attn_qkv.weight", "attn_qkv"),
        ("attn_kv_b.weight", "attn_kv_b"),
        ("attn_v.weight", "attn_v"),
        ("attn_k.weight", "attn_k"),
        ("attn_q.weight", "attn_q"),
        ("attn_output.weight", "attn_output"),
        ("ffn_up", "ffn_up"),
        ("ffn_gate", "ffn_gate"),
        ("ffn_down", "ffn_down"),
    ):
        if part in name:
            return cat
    return "other"


def allows_quantization(name: str, n_dims: int) -> bool:
    """Whether llama-quantize quantizes this tensor (the exclusions these architectures meet)."""
    if n_dims < 2 or not name.endswith("weight"):
        return False
    excluded = ("_norm.weight", "ffn_gate_inp.weight", "altup", "laurel", "per_layer_model_proj",
                "ssm_conv1d", "shortconv.conv.weight")
    return not any(part in name for part in excluded) and name not in (
        "position_embd.weight",
        "token_types.weight",
    )


def source_type(name: str, n_dims: int) -> str:
    """The type a converter stores an unquantized tensor in: F32 for vectors and the
    convolutions' taps, F16 for other matrices (the synthetic models' twins and files alike)."""
    if n_dims < 2 or "ssm_conv1d" in name or "shortconv.conv.weight" in name:
        return "F32"
    return "F16"


def sort_key(name: str) -> tuple[int, str]:
    """llama-quantize's tensor order: layer (-1 outside the blocks), then name."""
    layer = -1
    if name.startswith("blk."):
        head = name[4:].split(".", 1)[0]
        if head.isdigit():
            layer = int(head)
    return (layer, name)


@dataclass
class Tensor:
    """A tensor's name and shape in ggml order (`ne[0]` is the row length)."""

    name: str
    ne: tuple[int, ...]


def q4_k_m_types(tensors: list[Tensor], arch: str, n_layer: int, n_expert: int = 0) -> dict[str, str]:
    """The type llama-quantize Q4_K_M gives each tensor (name -> ggml type name); unquantized
    tensors keep their `source_type`."""
    if n_expert > 1:
        raise ValueError("the Q4_K_M rules here cover dense models only (no experts)")
    order = sorted(tensors, key=lambda t: sort_key(t.name))
    tied = not any(t.name == "output.weight" for t in order)
    n_attention_wv = sum(category(t.name) in ("attn_v", "attn_qkv", "attn_kv_b") for t in order)
    i_attention_wv = 0
    i_ffn_down = 0
    types: dict[str, str] = {}
    for t in order:
        if not allows_quantization(t.name, len(t.ne)):
            types[t.name] = source_type(t.name, len(t.ne))
            continue
        cat = category(t.name)
        new = "Q4_K"
        if cat == "output" or (tied and cat == "token_embd"):
            new = "Q8_0" if arch == "falcon" or t.ne[0] % BLOCK["Q4_K"] != 0 else "Q6_K"
        elif cat == "token_embd":
            pass
        elif cat in ("attn_v", "attn_qkv", "attn_kv_b"):
            if use_more_bits(i_attention_wv, n_attention_wv):
                new = "Q6_K"
            i_attention_wv += 1
        elif cat == "ffn_down":
            i_layer = i_ffn_down
            if arch == "falcon":
                new = (
                    "Q6_K"
                    if i_layer < n_layer // 16
                    else "Q5_K" if use_more_bits(i_layer, n_layer) else "Q4_K"
                )
            elif use_more_bits(i_layer, n_layer):
                new = "Q6_K"
            i_ffn_down += 1
        types[t.name] = fallback(new, t.ne[0])
    return types


def fallback(new: str, ncols: int) -> str:
    """llama.cpp's type for rows whose length the type's block does not divide."""
    if ncols % BLOCK[new] == 0:
        return new
    alt = FALLBACK[new]
    return alt if ncols % BLOCK[alt] == 0 else "F16"
