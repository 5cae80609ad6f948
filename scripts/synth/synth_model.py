#!/usr/bin/env python3
"""Synthetic GGUF models of real shapes in llama.cpp's Q4_K_M mix, for speed benchmarks.

Usage:
    python scripts/synth/synth_model.py [SHAPE ...] [--out DIR] [--layers N] [--seed S]
                                        [--sdist TARBALL] [--gemma-vocab GGUF] [--check]
                                        [--twin] [--force] [--list]

SHAPE is one of the names --list prints (default: all). Writes DIR/<file> (DIR defaults to
target/models under the repository root; a file already there is kept unless --force). With
--layers N the model keeps its widths and vocabulary but has N blocks (named in the file name);
the types then follow the rules for N blocks. --check reads each file back with gguf-py (after
writing, or alone when the file exists): the metadata, every tensor's name, shape and type
against the Q4_K_M rules (q4_k_m.py), and a sample of every quantized tensor's rows dequantized
by gguf-py (finite, centred, of the intended scale). --twin writes instead a sparse F16 file of the
same shape (no data on disk), the input llama-quantize's dry run takes (record_llama_types.py).

The shapes are the real models' hyper-parameters (their Hugging Face configs and the GGUF
files llama.cpp's converter writes from them): widths, heads, layers, feed-forward width,
RoPE bases (Llama 3's frequency factors as rope_freqs.weight, from its rope_scaling), context
length, tied output (no output.weight: the token embeddings serve as output, as in all of them);
LFM2's layer pattern (short convolutions and attention) and Qwen 3.5's (gated delta-nets and
gated full attention), Phi-4-mini's fused QKV and gate-up projections and LongRoPE factors,
Gemma 4 E2B's sliding / full layers of two head sizes, KV-sharing layers with double-wide MLPs
and per-layer token embeddings, with their tensors as llama.cpp's loader names them.
The vocabularies are real:
  llama-3.2-1b   llama.cpp's models/ggml-vocab-llama-bpe.gguf (Llama 3's tokenizer, 128256
                 tokens = Llama 3.2's vocab_size) from the llama-cpp-python 0.3.36 sdist
  qwen2.5-1.5b   models/ggml-vocab-qwen2.gguf (Qwen2's tokenizer, 151936 entries with the
                 padding, = Qwen2.5's vocab_size) from the same sdist
  gemma-3-1b     the tokenizer of Gemma 3 270M (target/models/gemma3-270m-q4_k_m.gguf from
                 scripts/setup.sh), which is Gemma 3's one tokenizer (262144 tokens, = the 1B's
                 vocab_size)
  gemma-4-e2b    models/ggml-vocab-gemma-4.gguf (Gemma 4's tokenizer, 262144 tokens) from the
                 same sdist
  smollm3-3b     models/ggml-vocab-llama-bpe.gguf (Llama 3's tokenizer, 128256 tokens =
                 SmolLM3's vocab_size; SmolLM3 uses it with its own chat tokens written over
                 two reserved ones, which this file does not have: a fair stand-in)
and, where the sdist lacks the family's own vocabulary, stand-ins of the right size
(standin_vocab):
  lfm2-350m      LFM2's vocabulary (65536 tokens) is in no package the project fetches: Llama 3's
                 BPE cut to 65536 tokens, pre-tokenizer lfm2, LFM2's special tokens
  qwen3.5-0.8b   models/ggml-vocab-qwen35.gguf (llama.cpp's Qwen 3.5 tokenizer test file:
                 151936 tokens, pre-tokenizer qwen35) padded with unused tokens to Qwen 3.5's
                 248320
  phi-4-mini     Phi-4-mini's own (o200k-based, 200064 tokens) is in no package the project
                 fetches: models/ggml-vocab-qwen2.gguf (151936) padded the same way to 200064
The sdist is taken from --sdist, else target/downloads/, else fetched there from PyPI (the URL
its simple index lists, sha256 pinned).

Weights: random but valid blocks (speed does not depend on the values): quants from PCG64's raw
stream (seeded per tensor from --seed and the tensor's name, so every run writes the same bytes
with any NumPy), block scales chosen so that a row's values have a standard deviation of about
1/sqrt(row length) (0.02 for the token embeddings), finite everywhere, with sub-block scales
spanning the upper half of their range as llama.cpp's quantizers fill it (so block scales d are
as small as real files', subnormal F16 in some Q6_K and Q4_K tensors as there); norms 1, biases
small, convolution taps (F32, as llama-quantize leaves them) uniform of standard deviation
1/sqrt(taps), Qwen 3.5's ssm_a (= -exp(A_log)) between -1 and -0.1.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import mmap
import os
import struct
import sys
import tarfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT

sys.path.insert(0, str(Path(__file__).resolve().parent))
from q4_k_m import Tensor, q4_k_m_types, sort_key, source_type  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SDIST_NAME = "llama_cpp_python-0.3.36.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
SDIST_MODELS = "llama_cpp_python-0.3.36/vendor/llama.cpp/models/"
LLAMA_FTYPE_MOSTLY_Q4_K_M = 15


# ----------------------------------------------------------------------------------------------
# Shapes
# ----------------------------------------------------------------------------------------------


@dataclass
class Shape:
    """One real model's architecture and hyper-parameters."""

    name: str
    title: str
    arch: str
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    n_ctx: int
    rms_eps: float
    rope_base: float
    vocab: str  # "sdist:<file>" or "gemma"
    qkv_bias: bool = False
    extra: dict = field(default_factory=dict)  # further GGUF keys (without the arch prefix)
    llama3_rope: dict | None = None  # Llama 3 rope_scaling -> rope_freqs.weight
    attn_layers: tuple[int, ...] | None = None  # LFM2: the attention layers (the rest convolve)
    l_cache: int = 0  # LFM2: the short convolutions' taps
    ssm: dict | None = None  # Qwen 3.5: the gated delta-nets' sizes
    longrope: dict | None = None  # Phi-3: LongRoPE's rotated dimensions and original context
    gemma4: dict | None = None  # Gemma 4: sliding / global layers, shared KV, per-layer inputs
    test_layers: int = 2  # the layers of test_synth.py's small model of the shape

    def layer_kind(self, il: int) -> str:
        """"attn", "conv" (LFM2's short convolution) or "deltanet" (Qwen 3.5's gated delta-net)."""
        if self.attn_layers is not None:
            return "attn" if il in self.attn_layers else "conv"
        if self.ssm is not None:
            return "attn" if (il + 1) % self.ssm["full_attention_interval"] == 0 else "deltanet"
        return "attn"

    def ff_width(self, il: int, n_layer: int) -> int:
        """Layer il's feed-forward width: Gemma 4 E2B's KV-sharing layers (the top
        shared_kv_layers of the n_layer) have a double-wide MLP."""
        g = self.gemma4
        if g is not None and g["double_wide_mlp"] and il >= n_layer - self.n_shared_kv(n_layer):
            return 2 * self.n_ff
        return self.n_ff

    def n_shared_kv(self, n_layer: int) -> int:
        """Gemma 4: how many top layers attend over the caches of the layers below them: all
        above the first kv_layers (the real model's 15 of 35, which end with a sliding then a
        global layer as the sharing needs), or with fewer layers all above the first period
        of the pattern."""
        g = self.gemma4
        if g is None:
            return 0
        kv = g["kv_layers"] if n_layer == self.n_layer else len(g["swa_pattern"])
        return max(0, n_layer - kv)

    def is_swa(self, il: int) -> bool:
        """Gemma 4: whether layer il is a sliding-window layer (the pattern repeats)."""
        g = self.gemma4
        assert g is not None
        return g["swa_pattern"][il % len(g["swa_pattern"])]

    def file_name(self, layers: int | None) -> str:
        return f"synth-{self.name}-q4_k_m" + (f"-{layers}l" if layers else "") + ".gguf"


SHAPES = {
    s.name: s
    for s in [
        # meta-llama/Llama-3.2-1B(-Instruct): hidden 2048, 16 layers, 32 / 8 heads of 64, intermediate 8192,
        # rope_theta 500000 with llama3 scaling (factor 32, low 1, high 4, original 8192),
        # max_position_embeddings 131072, rms_norm_eps 1e-5, vocab 128256, tied embeddings.
        Shape(
            "llama-3.2-1b", "Llama 3.2 1B", "llama", 2048, 16, 32, 8, 64, 8192, 128256, 131072,
            1e-5, 500000.0, "sdist:ggml-vocab-llama-bpe.gguf",
            extra={"rope.dimension_count": 64, "vocab_size": 128256},
            llama3_rope={"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192},
        ),
        # Qwen/Qwen2.5-1.5B-Instruct: hidden 1536, 28 layers, 12 / 2 heads of 128, intermediate
        # 8960, rope_theta 1e6, max_position_embeddings 32768, rms_norm_eps 1e-6, vocab 151936,
        # tied embeddings, Q/K/V biases.
        Shape(
            "qwen2.5-1.5b", "Qwen2.5 1.5B", "qwen2", 1536, 28, 12, 2, 128, 8960, 151936, 32768,
            1e-6, 1000000.0, "sdist:ggml-vocab-qwen2.gguf", qkv_bias=True,
        ),
        # google/gemma-3-1b-it (and -pt): hidden 1152, 26 layers, 4 / 1 heads of 256, intermediate 6912,
        # rope_theta 1e6 (global layers), 10000 (local), sliding window 512 (5 local : 1 global),
        # max_position_embeddings 32768, rms_norm_eps 1e-6, vocab 262144, tied embeddings,
        # Q/K norms and post-attention / post-FFN norms.
        Shape(
            "gemma-3-1b", "Gemma 3 1B", "gemma3", 1152, 26, 4, 1, 256, 6912, 262144, 32768,
            1e-6, 1000000.0, "gemma",
            extra={"attention.sliding_window": 512},
        ),
        # LiquidAI/LFM2-350M: hidden 1024, 16 layers, full_attn_idxs [2, 5, 8, 10, 12, 14] (the
        # other 10 are gated short convolutions, conv_L_cache 3 taps), 16 / 8 heads of 64 with
        # Q/K RMS norms, block_ff_dim 6656 auto-adjusted (int(2 * 6656 / 3) = 4437, times
        # block_ffn_dim_multiplier 1.0, rounded up to block_multiple_of 256) to 4608,
        # rope_theta 1e6, max_position_embeddings 128000, norm_eps 1e-5, vocab 65536, tied
        # embeddings; the final norm is token_embd_norm in llama.cpp's names.
        Shape(
            "lfm2-350m", "LFM2 350M", "lfm2", 1024, 16, 16, 8, 64, 4608, 65536, 128000,
            1e-5, 1000000.0, "lfm2-standin",
            extra={"rope.dimension_count": 64, "shortconv.l_cache": 3, "vocab_size": 65536},
            attn_layers=(2, 5, 8, 10, 12, 14), l_cache=3, test_layers=3,
        ),
        # Qwen/Qwen3.5-0.8B (text model): hidden 1024, 24 layers, full_attention_interval 4
        # (layers 3, 7, ..., 23 gated full attention, the other 18 gated delta-nets),
        # attention 8 / 2 heads of 256 with attn_output_gate (attn_q twice as wide) and Q/K
        # norms, partial_rotary_factor 0.25 (64 of 256 dimensions rotated), mrope_section
        # [11, 11, 10], rope_theta 1e7; delta-nets linear_conv_kernel_dim 4, 16 key heads and
        # 16 value heads of 128; intermediate 3584, max_position_embeddings 262144,
        # rms_norm_eps 1e-6, vocab 248320, tied embeddings. GGUF keys as llama.cpp's converter
        # writes them: ssm.state_size = key head dim, group_count = key heads, time_step_rank =
        # value heads, inner_size = value heads x value head dim.
        Shape(
            "qwen3.5-0.8b", "Qwen3.5 0.8B", "qwen35", 1024, 24, 8, 2, 256, 3584, 248320, 262144,
            1e-6, 10000000.0, "qwen35-padded",
            extra={"rope.dimension_count": 64, "rope.dimension_sections": [11, 11, 10, 0],
                   "full_attention_interval": 4, "ssm.conv_kernel": 4, "ssm.state_size": 128,
                   "ssm.group_count": 16, "ssm.time_step_rank": 16, "ssm.inner_size": 2048,
                   "vocab_size": 248320},
            ssm={"full_attention_interval": 4, "d_conv": 4, "head_k_dim": 128, "n_k_heads": 16,
                 "head_v_dim": 128, "n_v_heads": 16},
            test_layers=4,
        ),
        # HuggingFaceTB/SmolLM3-3B: hidden 2048, 36 layers, 16 / 4 heads of 128, intermediate
        # 11008, rope_theta 5e6 and no RoPE in every fourth layer (no_rope_layer_interval 4:
        # llama.cpp's n_no_rope_layer_step, which no GGUF key carries), max_position_embeddings
        # 65536, rms_norm_eps 1e-6, vocab 128256 (Llama 3's tokenizer), tied embeddings.
        Shape(
            "smollm3-3b", "SmolLM3 3B", "smollm3", 2048, 36, 16, 4, 128, 11008, 128256, 65536,
            1e-6, 5000000.0, "sdist:ggml-vocab-llama-bpe.gguf",
            extra={"rope.dimension_count": 128, "vocab_size": 128256},
            test_layers=4,
        ),
        # microsoft/Phi-4-mini-instruct: hidden 3072, 32 layers, 24 / 8 heads of 128,
        # intermediate 8192, partial_rotary_factor 0.75 (96 of 128 dimensions rotated),
        # rope_theta 10000 with LongRoPE (rope_scaling longrope: short_factor and long_factor of
        # 48 values each, original_max_position_embeddings 4096), max_position_embeddings
        # 131072, sliding_window 262144, rms_norm_eps 1e-5, vocab 200064, tied embeddings. As
        # llama.cpp's converter writes it: Q, K and V in one attn_qkv (3072 -> 3072 + 2 x 1024),
        # gate and up in one ffn_up (3072 -> 2 x 8192), rope_factors_short / _long,
        # rope.scaling.attn_factor sqrt(1 + ln(131072 / 4096) / ln(4096)).
        Shape(
            "phi-4-mini", "Phi-4-mini", "phi3", 3072, 32, 24, 8, 128, 8192, 200064, 131072,
            1e-5, 10000.0, "phi4-padded",
            extra={"rope.dimension_count": 96, "rope.scaling.original_context_length": 4096,
                   "rope.scaling.attn_factor": math.sqrt(1 + math.log(131072 / 4096) / math.log(4096)),
                   "attention.sliding_window": 262144},
            longrope={"n_rot": 96, "original_context": 4096},
        ),
        # google/gemma-4-E2B (its text model): hidden 1536, 35 layers, layer_types
        # ([sliding_attention] x 4 + [full_attention]) x 7, 8 query heads and 1 KV head,
        # head_dim 256 (sliding) and global_head_dim 512 (full), sliding_window 512, RoPE theta
        # 1e4 on all 256 dimensions (sliding) and 1e6 "proportional" with partial_rotary_factor
        # 0.25 (full: rope_freqs turns 64 of the 256 pairs and leaves the rest, factor 1e30, as
        # the converter writes it), num_kv_shared_layers 20 (layers 15-34 attend over the
        # caches of 13, the last sliding, and 14, the last full layer below them), intermediate
        # 6144 with use_double_wide_mlp (12288 in the 20 shared layers), per-layer token
        # embeddings hidden_size_per_layer_input 256 (vocab_size_per_layer_input 262144),
        # final_logit_softcapping 30, max_position_embeddings 131072, rms_norm_eps 1e-6, vocab
        # 262144, tied embeddings. The shared layers keep their attn_k / attn_v / attn_k_norm in
        # the checkpoint and in its GGUF files (unused; llama-quantize counts them).
        Shape(
            "gemma-4-e2b", "Gemma 4 E2B", "gemma4", 1536, 35, 8, 1, 512, 6144, 262144, 131072,
            1e-6, 1000000.0, "sdist:ggml-vocab-gemma-4.gguf",
            extra={"attention.key_length_swa": 256, "attention.value_length_swa": 256,
                   "rope.dimension_count": 512, "rope.dimension_count_swa": 256,
                   "rope.freq_base_swa": 10000.0, "attention.sliding_window": 512,
                   "embedding_length_per_layer_input": 256, "final_logit_softcapping": 30.0},
            gemma4={"swa_pattern": (True, True, True, True, False), "kv_layers": 15,
                    "double_wide_mlp": True, "n_embd_per_layer": 256, "head_dim_swa": 256,
                    "full_rotary_factor": 0.25},
            test_layers=10,
        ),
    ]
}


def tensor_list(s: Shape, n_layer: int) -> list[Tensor]:
    """Every tensor of the shape (ggml `ne` order), in llama-quantize's order."""
    e, hd = s.n_embd, s.head_dim
    nq, nkv = s.n_head * hd, s.n_head_kv * hd
    final_norm = "token_embd_norm.weight" if s.arch == "lfm2" else "output_norm.weight"
    ts = [Tensor("token_embd.weight", (e, s.n_vocab)), Tensor(final_norm, (e,))]
    if s.llama3_rope:
        ts.append(Tensor("rope_freqs.weight", (hd // 2,)))
    if s.gemma4:
        pl = s.gemma4["n_embd_per_layer"] * n_layer
        ts += [Tensor("per_layer_token_embd.weight", (pl, s.n_vocab)),
               Tensor("per_layer_model_proj.weight", (e, pl)),
               Tensor("per_layer_proj_norm.weight", (s.gemma4["n_embd_per_layer"],)),
               Tensor("rope_freqs.weight", (hd // 2,))]
    if s.longrope:
        ts += [Tensor("rope_factors_long.weight", (s.longrope["n_rot"] // 2,)),
               Tensor("rope_factors_short.weight", (s.longrope["n_rot"] // 2,))]
    for il in range(n_layer):
        b = f"blk.{il}."
        if s.arch in ("lfm2", "qwen35"):
            ts += hybrid_layer(s, b, s.layer_kind(il))
            continue
        if s.arch == "gemma4":
            ts += gemma4_layer(s, b, il, n_layer)
            continue
        if s.arch == "phi3":
            ts += [
                Tensor(b + "attn_norm.weight", (e,)),
                Tensor(b + "attn_qkv.weight", (e, nq + 2 * nkv)),
                Tensor(b + "attn_output.weight", (nq, e)),
                Tensor(b + "ffn_norm.weight", (e,)),
                Tensor(b + "ffn_up.weight", (e, 2 * s.n_ff)),
                Tensor(b + "ffn_down.weight", (s.n_ff, e)),
            ]
            continue
        ts += [
            Tensor(b + "attn_norm.weight", (e,)),
            Tensor(b + "attn_q.weight", (e, nq)),
            Tensor(b + "attn_k.weight", (e, nkv)),
            Tensor(b + "attn_v.weight", (e, nkv)),
            Tensor(b + "attn_output.weight", (nq, e)),
            Tensor(b + "ffn_norm.weight", (e,)),
            Tensor(b + "ffn_gate.weight", (e, s.n_ff)),
            Tensor(b + "ffn_up.weight", (e, s.n_ff)),
            Tensor(b + "ffn_down.weight", (s.n_ff, e)),
        ]
        if s.qkv_bias:
            ts += [Tensor(b + "attn_q.bias", (nq,)), Tensor(b + "attn_k.bias", (nkv,)),
                   Tensor(b + "attn_v.bias", (nkv,))]
        if s.arch == "gemma3":
            ts += [Tensor(b + "attn_q_norm.weight", (hd,)), Tensor(b + "attn_k_norm.weight", (hd,)),
                   Tensor(b + "post_attention_norm.weight", (e,)),
                   Tensor(b + "post_ffw_norm.weight", (e,))]
    return sorted(ts, key=lambda t: sort_key(t.name))


def gemma4_layer(s: Shape, b: str, il: int, n_layer: int) -> list[Tensor]:
    """One Gemma 4 layer (prefix b) as llama.cpp's loader names it: the sliding layers' heads
    of head_dim_swa, the full ones' of head_dim; K / V kept in the KV-sharing layers too, as
    the checkpoint has them; the layer's FFN width; the per-layer input gate, projection and
    norm; the output scale."""
    g = s.gemma4
    assert g is not None
    e, pl = s.n_embd, g["n_embd_per_layer"]
    hd = g["head_dim_swa"] if s.is_swa(il) else s.head_dim
    f = s.ff_width(il, n_layer)
    return [
        Tensor(b + "attn_norm.weight", (e,)),
        Tensor(b + "attn_q.weight", (e, s.n_head * hd)),
        Tensor(b + "attn_k.weight", (e, s.n_head_kv * hd)),
        Tensor(b + "attn_v.weight", (e, s.n_head_kv * hd)),
        Tensor(b + "attn_q_norm.weight", (hd,)),
        Tensor(b + "attn_k_norm.weight", (hd,)),
        Tensor(b + "attn_output.weight", (s.n_head * hd, e)),
        Tensor(b + "post_attention_norm.weight", (e,)),
        Tensor(b + "ffn_norm.weight", (e,)),
        Tensor(b + "ffn_gate.weight", (e, f)),
        Tensor(b + "ffn_up.weight", (e, f)),
        Tensor(b + "ffn_down.weight", (f, e)),
        Tensor(b + "post_ffw_norm.weight", (e,)),
        Tensor(b + "inp_gate.weight", (e, pl)),
        Tensor(b + "proj.weight", (pl, e)),
        Tensor(b + "post_norm.weight", (e,)),
        Tensor(b + "layer_output_scale.weight", (1,)),
    ]


def hybrid_layer(s: Shape, b: str, kind: str) -> list[Tensor]:
    """One LFM2 or Qwen 3.5 layer (prefix b), in the names and shapes of llama.cpp's loader."""
    e, hd = s.n_embd, s.head_dim
    nq, nkv = s.n_head * hd, s.n_head_kv * hd
    ffn = [Tensor(b + "ffn_gate.weight", (e, s.n_ff)), Tensor(b + "ffn_up.weight", (e, s.n_ff)),
           Tensor(b + "ffn_down.weight", (s.n_ff, e))]
    # Qwen 3.5's full attention: attn_q holds each head's query then its output gate.
    q_width = 2 * nq if s.arch == "qwen35" else nq
    attn = [Tensor(b + "attn_q.weight", (e, q_width)), Tensor(b + "attn_k.weight", (e, nkv)),
            Tensor(b + "attn_v.weight", (e, nkv)), Tensor(b + "attn_q_norm.weight", (hd,)),
            Tensor(b + "attn_k_norm.weight", (hd,)), Tensor(b + "attn_output.weight", (nq, e))]
    ts = [Tensor(b + "attn_norm.weight", (e,))]
    if s.arch == "lfm2":
        if kind == "conv":
            ts += [Tensor(b + "shortconv.in_proj.weight", (e, 3 * e)),
                   Tensor(b + "shortconv.conv.weight", (s.l_cache, e)),
                   Tensor(b + "shortconv.out_proj.weight", (e, e))]
        else:
            ts += attn
        return ts + [Tensor(b + "ffn_norm.weight", (e,))] + ffn
    if kind == "deltanet":
        d = s.ssm
        assert d is not None
        key_dim = d["head_k_dim"] * d["n_k_heads"]
        value_dim = d["head_v_dim"] * d["n_v_heads"]
        conv_dim = 2 * key_dim + value_dim
        ts += [Tensor(b + "attn_qkv.weight", (e, conv_dim)), Tensor(b + "attn_gate.weight", (e, value_dim)),
               Tensor(b + "ssm_conv1d.weight", (d["d_conv"], conv_dim)),
               Tensor(b + "ssm_dt.bias", (d["n_v_heads"],)), Tensor(b + "ssm_a", (d["n_v_heads"],)),
               Tensor(b + "ssm_beta.weight", (e, d["n_v_heads"])),
               Tensor(b + "ssm_alpha.weight", (e, d["n_v_heads"])),
               Tensor(b + "ssm_norm.weight", (d["head_v_dim"],)),
               Tensor(b + "ssm_out.weight", (value_dim, e))]
    else:
        ts += attn
    return ts + [Tensor(b + "post_attention_norm.weight", (e,))] + ffn


def metadata(s: Shape, n_layer: int) -> list[tuple[str, object, VT]]:
    """The model's GGUF keys (without the tokenizer's)."""
    a = s.arch
    kv: list[tuple[str, object, VT]] = [
        ("general.architecture", a, VT.STRING),
        ("general.type", "model", VT.STRING),
        ("general.name", f"{s.title} (synthetic: random Q4_K_M blocks)", VT.STRING),
        (f"{a}.context_length", s.n_ctx, VT.UINT32),
        (f"{a}.embedding_length", s.n_embd, VT.UINT32),
        (f"{a}.block_count", n_layer, VT.UINT32),
        # Gemma 4: per layer (the KV-sharing layers' double-wide MLP)
        (f"{a}.feed_forward_length", s.n_ff, VT.UINT32) if s.gemma4 is None else
        (f"{a}.feed_forward_length", [s.ff_width(il, n_layer) for il in range(n_layer)], VT.ARRAY),
        (f"{a}.attention.head_count", s.n_head, VT.UINT32),
        # LFM2: per layer, 0 in the convolution layers
        (f"{a}.attention.head_count_kv", s.n_head_kv, VT.UINT32) if s.attn_layers is None else
        (f"{a}.attention.head_count_kv",
         [s.n_head_kv if s.layer_kind(il) == "attn" else 0 for il in range(n_layer)], VT.ARRAY),
        (f"{a}.rope.freq_base", s.rope_base, VT.FLOAT32),
        (f"{a}.attention.layer_norm_rms_epsilon", s.rms_eps, VT.FLOAT32),
    ]
    if s.head_dim != s.n_embd // s.n_head or a in ("llama", "gemma3"):
        kv += [(f"{a}.attention.key_length", s.head_dim, VT.UINT32),
               (f"{a}.attention.value_length", s.head_dim, VT.UINT32)]
    kv += [(f"{a}.{k}", v, value_type(v)) for k, v in s.extra.items()]
    if s.gemma4:
        kv += [(f"{a}.attention.sliding_window_pattern", [s.is_swa(il) for il in range(n_layer)], VT.ARRAY),
               (f"{a}.attention.shared_kv_layers", s.n_shared_kv(n_layer), VT.UINT32)]
    kv += [("general.file_type", LLAMA_FTYPE_MOSTLY_Q4_K_M, VT.UINT32),
           ("general.quantization_version", 2, VT.UINT32)]
    return kv


def gemma4_rope_freqs(s: Shape) -> np.ndarray:
    """Gemma 4's full layers' "proportional" RoPE as llama.cpp's converter writes it: the
    first partial_rotary_factor of each head's dimension pairs turn (factor 1), the rest keep
    still (factor 1e30)."""
    g = s.gemma4
    assert g is not None
    half = s.head_dim // 2
    turning = int(s.head_dim * g["full_rotary_factor"] / 2)
    return np.array([1.0] * turning + [1e30] * (half - turning), dtype=np.float32)


def longrope_factors(s: Shape, name: str) -> np.ndarray:
    """Phi-3's LongRoPE factors per rotated dimension pair (rope_factors_short.weight for
    contexts up to the original one, _long beyond). A stand-in of the right length: the
    published lists are not reproduced here, and speed does not depend on them; short 1,
    long growing from 1 to 16 along the dimensions (the slow ones stretched most)."""
    r = s.longrope
    assert r is not None
    half = r["n_rot"] // 2
    if name == "rope_factors_short.weight":
        return np.ones(half, dtype=np.float32)
    ramp = np.arange(half, dtype=np.float64) / (half - 1)
    return (1.0 + 15.0 * ramp**2).astype(np.float32)


def value_type(v: object) -> VT:
    """The GGUF type of a further key's value: arrays, booleans, floats, else UINT32."""
    if isinstance(v, list):
        return VT.ARRAY
    if isinstance(v, bool):
        return VT.BOOL
    return VT.FLOAT32 if isinstance(v, float) else VT.UINT32


def llama3_rope_factors(s: Shape) -> np.ndarray:
    """Llama 3's RoPE frequency factors (its rope_scaling "llama3": wavelengths shorter than
    original / high_freq_factor keep their frequency, longer than original / low_freq_factor
    are divided by factor, and those between are interpolated smoothly)."""
    r = s.llama3_rope
    assert r is not None
    dim = s.head_dim
    freqs = 1.0 / (s.rope_base ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    old = r["original_max_position_embeddings"]
    low_wavelen = old / r["low_freq_factor"]
    high_wavelen = old / r["high_freq_factor"]
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(r["factor"])
        else:
            smooth = (old / wavelen - r["low_freq_factor"]) / (r["high_freq_factor"] - r["low_freq_factor"])
            out.append(1.0 / ((1 - smooth) / r["factor"] + smooth))
    return np.array(out, dtype=np.float32)


# ----------------------------------------------------------------------------------------------
# Vocabularies
# ----------------------------------------------------------------------------------------------


def sdist_path(explicit: str | None) -> Path:
    """The llama-cpp-python sdist: --sdist, target/downloads/, or fetched from PyPI there."""
    if explicit:
        return Path(explicit)
    path = REPO / "target" / "downloads" / SDIST_NAME
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        print(f"synth: fetching {SDIST_NAME} from PyPI into {path.parent}", file=sys.stderr)
        req = urllib.request.Request("https://pypi.org/simple/llama-cpp-python/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
        files = json.load(urllib.request.urlopen(req, timeout=120))["files"]
        entry = next(f for f in files if f["filename"] == SDIST_NAME)
        data = urllib.request.urlopen(entry["url"], timeout=600).read()
        if hashlib.sha256(data).hexdigest() != SDIST_SHA256:
            sys.exit(f"synth: {SDIST_NAME}: sha256 {hashlib.sha256(data).hexdigest()}, pinned {SDIST_SHA256}")
        tmp = path.with_suffix(".part")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    return path


def sdist_vocab(name: str, sdist: str | None) -> Path:
    """models/<name> from the sdist, extracted once into target/downloads/."""
    out = REPO / "target" / "downloads" / name
    if out.exists():
        return out
    tarball = sdist_path(sdist)
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        sys.exit(f"synth: {tarball}: sha256 {digest}, pinned {SDIST_SHA256}")
    with tarfile.open(tarball) as tf:
        member = tf.extractfile(SDIST_MODELS + name)
        if member is None:
            sys.exit(f"synth: {tarball} has no {SDIST_MODELS + name}")
        data = member.read()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".part")
    tmp.write_bytes(data)
    os.replace(tmp, out)
    return out


STANDIN_SOURCE = {"lfm2-standin": "ggml-vocab-llama-bpe.gguf", "qwen35-padded": "ggml-vocab-qwen35.gguf",
                  "phi4-padded": "ggml-vocab-qwen2.gguf"}


def vocab_file(s: Shape, args: argparse.Namespace) -> Path:
    if s.vocab in STANDIN_SOURCE:
        return sdist_vocab(STANDIN_SOURCE[s.vocab], args.sdist)
    if s.vocab == "gemma":
        if args.gemma_vocab:
            return Path(args.gemma_vocab)
        env = os.environ.get("TESSERA_GEMMA_GGUF")
        p = Path(env) if env else REPO / "target" / "models" / "gemma3-270m-q4_k_m.gguf"
        if not p.exists():
            sys.exit(f"synth: the Gemma 3 tokenizer comes from {p}: run scripts/setup.sh demo")
        return p
    return sdist_vocab(s.vocab.split(":", 1)[1], args.sdist)


def shape_tokenizer(s: Shape, args: argparse.Namespace) -> list[tuple[str, object, VT, VT | None]]:
    """The shape's tokenizer.* keys: its vocabulary's file, or the stand-in made from it."""
    return tokenizer_fields(vocab_file(s, args), s.n_vocab, s.vocab if s.vocab in STANDIN_SOURCE else None)


# GGUF value types: struct format of the fixed-size ones.
SCALAR = {VT.UINT8: "<B", VT.INT8: "<b", VT.UINT16: "<H", VT.INT16: "<h", VT.UINT32: "<I",
          VT.INT32: "<i", VT.FLOAT32: "<f", VT.BOOL: "<?", VT.UINT64: "<Q", VT.INT64: "<q",
          VT.FLOAT64: "<d"}


def read_header(path: Path) -> tuple[list[tuple[str, object, VT, VT | None]], list[tuple[str, tuple[int, ...], int]]]:
    """The metadata of a GGUF v2/v3 file, (key, value, type, array item type) with strings as
    bytes, and its tensor infos, (name, ne, ggml type id). (gguf-py's GGUFReader takes tens of
    seconds over a vocabulary's 400k strings.)"""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        magic, version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", buf, 0)
        if magic != b"GGUF" or version not in (2, 3):
            sys.exit(f"synth: {path} is not a GGUF v2/v3 file")
        pos = 24

        def take(fmt: str) -> object:
            nonlocal pos
            (v,) = struct.unpack_from(fmt, buf, pos)
            pos += struct.calcsize(fmt)
            return v

        def string() -> bytes:
            nonlocal pos
            n = take("<Q")
            pos += n
            return buf[pos - n:pos]

        def value(vt: VT) -> object:
            return string() if vt == VT.STRING else take(SCALAR[vt])

        kv = []
        for _ in range(n_kv):
            key = string().decode()
            vt = VT(take("<I"))
            if vt == VT.ARRAY:
                sub = VT(take("<I"))
                n = take("<Q")
                if sub in SCALAR:
                    fmt = SCALAR[sub]
                    vals = list(struct.unpack_from(f"<{n}{fmt[1]}", buf, pos))
                    pos += n * struct.calcsize(fmt)
                else:
                    vals = [value(sub) for _ in range(n)]
                kv.append((key, vals, vt, sub))
            else:
                kv.append((key, value(vt), vt, None))
        tensors = []
        for _ in range(n_tensors):
            name = string().decode()
            n_dims = take("<I")
            ne = tuple(take("<Q") for _ in range(n_dims))
            ggml_type = take("<I")
            take("<Q")  # offset
            tensors.append((name, ne, ggml_type))
    return kv, tensors


def weight_bytes_per_token(path: Path) -> int:
    """Bytes of weights one generated token reads: every tensor, the token embeddings only when
    they are also the output (tied; else one row of them, left out), never Gemma 4's per-layer
    token embeddings (one row per token) nor the K / V projections its KV-sharing layers keep
    unused."""
    kv, tensors = read_header(path)
    meta = {key: val for key, val, _, _ in kv}
    arch = meta.get("general.architecture", b"").decode()
    n_layer = int(meta.get(f"{arch}.block_count", 0))
    first_shared = n_layer - int(meta.get(f"{arch}.attention.shared_kv_layers", 0))
    unused = {f"blk.{il}.{k}.weight" for il in range(first_shared, n_layer)
              for k in ("attn_k", "attn_v", "attn_k_norm")}
    names = {name for name, _, _ in tensors}
    total = 0
    for name, ne, t in tensors:
        if name == "token_embd.weight" and "output.weight" in names:
            continue
        if name == "per_layer_token_embd.weight" or name in unused:
            continue
        block, size = gguf.GGML_QUANT_SIZES[QT(t)]
        total += math.prod(ne) // block * size
    return total


TOKEN_CONTROL, TOKEN_UNUSED = 3, 5  # llama.cpp's token types


def standin_vocab(kind: str, fields: list, n_vocab: int) -> list[tuple[str, object, VT, VT | None]]:
    """The stand-in vocabularies of the right size where the sdist lacks the family's own.

    phi4-padded: Phi-4-mini's vocabulary (o200k-based byte-level BPE, 200064 tokens) is in no
    package the project fetches: Qwen2's byte-level BPE (ggml-vocab-qwen2.gguf, 151936 tokens,
    pre-tokenizer qwen2) padded the same way to 200064.
    qwen35-padded: llama.cpp's Qwen 3.5 tokenizer test vocabulary (ggml-vocab-qwen35.gguf, 151936
    tokens: Qwen 2's tokens, pre-tokenizer qwen35), padded with "[PAD<id>]" tokens of type
    UNUSED to Qwen 3.5's 248320 (as llama.cpp's converter pads a vocabulary to the model's
    vocab_size), <|im_end|> (151645) as EOS and no BOS added, as tiny-qwen35 has it.
    lfm2-standin: LFM2's own vocabulary (65536 tokens) is in no package the project fetches:
    Llama 3's byte-level BPE (ggml-vocab-llama-bpe.gguf) cut to its first 65536 tokens (the
    merges kept where both halves and the result are among them), LFM2's pre-tokenizer name
    (lfm2, which llama.cpp maps to Llama 3's split) and LFM2's special tokens written over the
    last three ids (<|startoftext|> as BOS, <|im_start|>, <|im_end|> as EOS, CONTROL type).
    """
    out = []
    keep = None
    for key, val, vt, sub in fields:
        if kind in ("qwen35-padded", "phi4-padded"):
            if key == "tokenizer.ggml.tokens":
                val = list(val) + [f"[PAD{i}]".encode() for i in range(len(val), n_vocab)]
            elif key == "tokenizer.ggml.token_type":
                val = list(val) + [TOKEN_UNUSED] * (n_vocab - len(val))
            elif key == "tokenizer.ggml.eos_token_id" and kind == "qwen35-padded":
                val = 151645
        elif kind == "lfm2-standin":
            if key == "tokenizer.ggml.tokens":
                val = list(val[:n_vocab])
                val[n_vocab - 3:] = [b"<|startoftext|>", b"<|im_start|>", b"<|im_end|>"]
                keep = set(val)
            elif key == "tokenizer.ggml.token_type":
                val = list(val[:n_vocab])
                val[n_vocab - 3:] = [TOKEN_CONTROL] * 3
            elif key == "tokenizer.ggml.merges":
                assert keep is not None, "the merges come after the tokens"
                kept = []
                for m in val:
                    a, _, b = m.partition(b" ")
                    if a in keep and b in keep and a + b in keep:
                        kept.append(m)
                val = kept
            elif key == "tokenizer.ggml.pre":
                val = b"lfm2"
            elif key == "tokenizer.ggml.bos_token_id":
                val = n_vocab - 3
            elif key == "tokenizer.ggml.eos_token_id":
                val = n_vocab - 1
        out.append((key, val, vt, sub))
    keys = {k for k, _, _, _ in out}
    if kind == "qwen35-padded" and "tokenizer.ggml.add_bos_token" not in keys:
        out.append(("tokenizer.ggml.add_bos_token", False, VT.BOOL, None))
    if kind == "lfm2-standin" and "tokenizer.ggml.add_bos_token" not in keys:
        out.append(("tokenizer.ggml.add_bos_token", True, VT.BOOL, None))
    return out


def tokenizer_fields(path: Path, n_vocab: int, standin: str | None = None) -> list[tuple[str, object, VT, VT | None]]:
    """The tokenizer.* keys of a GGUF file, byte for byte (or made into a stand-in of n_vocab
    tokens: standin_vocab); checks the vocabulary's size."""
    out = [kv for kv in read_header(path)[0] if kv[0].startswith("tokenizer.")]
    if standin is not None:
        out = standin_vocab(standin, out, n_vocab)
    tokens = next((v for k, v, _, _ in out if k == "tokenizer.ggml.tokens"), None)
    if tokens is None or len(tokens) != n_vocab:
        sys.exit(f"synth: {path}: {0 if tokens is None else len(tokens)} tokens, the shape needs {n_vocab}")
    return out


# ----------------------------------------------------------------------------------------------
# Blocks
# ----------------------------------------------------------------------------------------------

# Bytes per block, and the standard deviation of one block's values per unit of its scale d
# (with the sub-block scales drawn below).
BLOCK_BYTES = {"Q4_K": 144, "Q6_K": 210, "Q5_0": 22, "Q8_0": 34}
QT_OF = {"Q4_K": QT.Q4_K, "Q6_K": QT.Q6_K, "Q5_0": QT.Q5_0, "Q8_0": QT.Q8_0, "F32": QT.F32, "F16": QT.F16}
STD_PER_D = {
    # Q4_K: d * sc * q - dmin * m with q uniform in 0..15 (std 4.61), sc = m uniform in 32..63
    # (rms 48.3) and dmin = 7.5 d: each sub-block centred, std 4.61 * 48.3 d.
    "Q4_K": 4.61 * 48.3,
    # Q6_K: d * sc * (q - 32), q uniform in 0..63 (std 18.47), sc uniform in 64..127 (rms 97.3).
    "Q6_K": 18.47 * 97.3,
    # Q5_0: d * (q - 16), q uniform in 0..31 (std 9.23).
    "Q5_0": 9.23,
    # Q8_0: d * q, q uniform in -128..127 (std 73.9).
    "Q8_0": 73.9,
}


def rng_for(seed: int, name: str) -> np.random.Generator:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return np.random.Generator(np.random.PCG64(int.from_bytes(digest[:16], "little")))


def random_bytes(rng: np.random.Generator, n: int) -> np.ndarray:
    """n bytes of PCG64's raw 64-bit stream (the same with every NumPy version)."""
    words = rng.bit_generator.random_raw((n + 7) // 8).astype("<u8", copy=False)
    return words.view(np.uint8)[:n]


def f16_bytes(value: float, n: int) -> np.ndarray:
    return np.full(n, value, dtype="<f2").view(np.uint8).reshape(n, 2)


def blocks(qtype: str, n_blocks: int, std: float, rng: np.random.Generator) -> np.ndarray:
    """n_blocks random valid blocks of qtype (uint8, n_blocks x block bytes)."""
    nb = BLOCK_BYTES[qtype]
    b = random_bytes(rng, n_blocks * nb).reshape(n_blocks, nb).copy()
    d = std / STD_PER_D[qtype]
    if qtype == "Q4_K":
        # d, dmin, 12 bytes of 6-bit scales and mins, 128 bytes of 4-bit quants.
        b[:, 0:2] = f16_bytes(d, n_blocks)
        b[:, 2:4] = f16_bytes(7.5 * d, n_blocks)
        sc = (32 | (b[:, 4:12] & 31)).astype(np.uint8)  # 8 sub-block scales, 32..63
        m = sc  # the mins equal the scales: every sub-block is centred (dmin = 7.5 d)
        packed = np.empty((n_blocks, 12), dtype=np.uint8)
        packed[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
        packed[:, 4:8] = (m[:, 0:4] & 63) | ((m[:, 4:8] >> 4) << 6)
        packed[:, 8:12] = (sc[:, 4:8] & 15) | ((m[:, 4:8] & 15) << 4)
        b[:, 4:16] = packed
    elif qtype == "Q6_K":
        # 128 bytes of low nibbles, 64 of high bit pairs, 16 int8 scales, d.
        b[:, 192:208] = 64 | (b[:, 192:208] & 63)
        b[:, 208:210] = f16_bytes(d, n_blocks)
    elif qtype in ("Q5_0", "Q8_0"):
        b[:, 0:2] = f16_bytes(d, n_blocks)
    else:
        raise ValueError(f"no block writer for {qtype}")
    return b


def tensor_data(s: Shape, t: Tensor, qtype: str, seed: int) -> np.ndarray:
    """The tensor's bytes (quantized: uint8 rows x row bytes; else float32)."""
    rng = rng_for(seed, t.name)
    if qtype == "F16":
        # a matrix llama-quantize leaves as the converter wrote it (Gemma 4's
        # per_layer_model_proj): uniform, std 1/sqrt(row length)
        n = math.prod(t.ne)
        uniform = random_bytes(rng, 4 * n).view("<u4").astype(np.float64) / 2**32
        return ((uniform - 0.5) * math.sqrt(12 / t.ne[0])).reshape(t.ne[::-1]).astype(np.float16)
    if qtype == "F32":
        if t.name == "rope_freqs.weight":
            return gemma4_rope_freqs(s) if s.gemma4 else llama3_rope_factors(s)
        if t.name.startswith("rope_factors_"):
            return longrope_factors(s, t.name)
        n = math.prod(t.ne)
        uniform = random_bytes(rng, 4 * n).view("<u4").astype(np.float64) / 2**32  # in [0, 1)
        if t.name.endswith(".bias"):
            return ((uniform - 0.5) * 0.04).astype(np.float32)
        if t.name.endswith(".ssm_a"):
            # A = -exp(A_log) as the converter stores it: decays exp(A dt) between exp(-1) and
            # exp(-0.1) per unit of dt
            return (-np.exp(np.log(0.1) + uniform * (0.0 - np.log(0.1)))).astype(np.float32)
        if len(t.ne) == 2:
            # the convolutions' taps (ssm_conv1d, shortconv.conv): uniform, std 1/sqrt(taps)
            return ((uniform - 0.5) * math.sqrt(12 / t.ne[0])).reshape(t.ne[::-1]).astype(np.float32)
        return np.ones(t.ne[0], dtype=np.float32)
    cols, rows = t.ne
    per_row = cols // gguf.GGML_QUANT_SIZES[QT_OF[qtype]][0]
    return blocks(qtype, rows * per_row, weight_std(t), rng).reshape(rows, per_row * BLOCK_BYTES[qtype])


def weight_std(t: Tensor) -> float:
    """The standard deviation of a quantized tensor's values: 0.02 for the token embeddings
    (Gemma 4's per-layer ones too), else 1/sqrt(row length)."""
    if t.name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return 0.02
    return 1.0 / math.sqrt(t.ne[0])


# ----------------------------------------------------------------------------------------------
# Writing and checking
# ----------------------------------------------------------------------------------------------


def new_writer(path: Path, s: Shape, n_layer: int, tok: list) -> gguf.GGUFWriter:
    w = gguf.GGUFWriter(path, s.arch)
    w.kv_data[0].clear()  # the constructor's general.architecture: ours comes in order below
    for key, val, vt in metadata(s, n_layer):
        w.add_key_value(key, val, vt)
    for key, val, vt, sub in tok:
        w.add_key_value(key, val, vt, sub_type=sub)
    return w


def write_model(s: Shape, path: Path, n_layer: int, seed: int, tok: list) -> None:
    ts = tensor_list(s, n_layer)
    types = q4_k_m_types(ts, s.arch, n_layer)
    tmp = path.with_suffix(".part")
    w = new_writer(tmp, s, n_layer, tok)
    for t in ts:
        q = types[t.name]
        if q == "F32":
            w.add_tensor_info(t.name, t.ne[::-1], np.dtype(np.float32), 4 * math.prod(t.ne))
        elif q == "F16":
            w.add_tensor_info(t.name, t.ne[::-1], np.dtype(np.float16), 2 * math.prod(t.ne))
        else:
            size = gguf.GGML_QUANT_SIZES[QT_OF[q]]
            nbytes = math.prod(t.ne) // size[0] * size[1]
            w.add_tensor_info(t.name, t.ne[::-1], np.dtype(np.float32), nbytes, raw_dtype=QT_OF[q])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for t in ts:
        w.write_tensor_data(tensor_data(s, t, types[t.name], seed))
    w.close()
    os.replace(tmp, path)


def write_twin(s: Shape, path: Path, n_layer: int, tok: list) -> None:
    """A sparse file of the same shape with F16 weights and F32 vectors (llama-quantize's
    input for its dry run): the header only, then a hole as long as the data."""
    ts = tensor_list(s, n_layer)
    w = new_writer(path, s, n_layer, tok)
    w.kv_data[0]["general.file_type"] = gguf.GGUFValue(1, VT.UINT32)  # MOSTLY_F16
    total = 0
    for t in ts:
        if source_type(t.name, len(t.ne)) == "F32":
            # F32 as the converter stores vectors and the convolutions' taps
            nbytes = 4 * math.prod(t.ne)
            w.add_tensor_info(t.name, t.ne[::-1], np.dtype(np.float32), nbytes)
        else:
            nbytes = 2 * math.prod(t.ne)
            w.add_tensor_info(t.name, t.ne[::-1], np.dtype(np.float16), nbytes)
        total += -(-nbytes // w.data_alignment) * w.data_alignment
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    with open(path, "r+b") as f:
        f.seek(0, io.SEEK_END)
        start = -(-f.tell() // w.data_alignment) * w.data_alignment
        f.truncate(start + total)


def check_model(s: Shape, path: Path, n_layer: int) -> list[str]:
    """Reads the file back with gguf-py: a list of problems (empty when it is right)."""
    r = gguf.GGUFReader(path)
    problems = []
    want_kv = {k: v for k, v, _ in metadata(s, n_layer)}
    for key, val in want_kv.items():
        f = r.fields.get(key)
        got = None if f is None else f.contents()
        ok = got is not None and (math.isclose(got, val, rel_tol=1e-6) if isinstance(val, float) else got == val)
        if not ok:
            problems.append(f"{key}: {got!r}, want {val!r}")
    tokens = r.fields.get("tokenizer.ggml.tokens")
    if tokens is None or len(tokens.data) != s.n_vocab:
        problems.append(f"tokenizer.ggml.tokens: {0 if tokens is None else len(tokens.data)}, want {s.n_vocab}")
    want = tensor_list(s, n_layer)
    types = q4_k_m_types(want, s.arch, n_layer)
    got = {t.name: t for t in r.tensors}
    if [t.name for t in r.tensors] != [t.name for t in want]:
        problems.append(f"tensor names or order differ: {[t.name for t in r.tensors][:8]} ...")
    for t in want:
        rt = got.get(t.name)
        if rt is None:
            continue
        if tuple(int(x) for x in rt.shape) != t.ne:
            problems.append(f"{t.name}: shape {list(rt.shape)}, want {list(t.ne)}")
        if rt.tensor_type.name != types[t.name]:
            problems.append(f"{t.name}: {rt.tensor_type.name}, the Q4_K_M rules give {types[t.name]}")
        if types[t.name] == "F32":
            if not np.all(np.isfinite(rt.data)):
                problems.append(f"{t.name}: not finite")
            continue
        if types[t.name] == "F16":
            vals = np.asarray(rt.data, dtype=np.float32)
            std = 1.0 / math.sqrt(t.ne[0])
            if not np.all(np.isfinite(vals)) or not 0.9 * std < float(np.std(vals)) < 1.1 * std:
                problems.append(f"{t.name}: F16 values not finite or std {float(np.std(vals)):.3g}, want {std:.3g}")
            continue
        # A sample of rows (first, middle, last) through gguf-py's dequantization.
        rows = np.asarray(rt.data)
        pick = sorted({0, rows.shape[0] // 2, rows.shape[0] - 1})
        vals = gguf.quants.dequantize(rows[pick], rt.tensor_type)
        std = weight_std(t)
        # Centred within 0.2 std: Q5_0's and Q8_0's quants sit half a step off centre (0.05 std),
        # a 3-row sample's mean wanders by about 0.02 std, and Q4_K mins that do not cancel the
        # scales (a wrong packing) give 0.5 std.
        got_std, got_mean = float(np.std(vals)), float(np.mean(vals))
        if not np.all(np.isfinite(vals)) or not (0.7 * std < got_std < 1.3 * std) or abs(got_mean) > 0.2 * std:
            problems.append(f"{t.name}: dequantized sample mean {got_mean:.3g}, std {got_std:.3g}, "
                            f"want about 0 and {std:.3g}")
    return problems


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shapes", nargs="*", help="shape names (default: all)")
    ap.add_argument("--out", default=str(REPO / "target" / "models"))
    ap.add_argument("--layers", type=int, help="blocks (default: the real model's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sdist", help=f"the {SDIST_NAME} tarball")
    ap.add_argument("--gemma-vocab", help="a Gemma 3 GGUF file to take the tokenizer from")
    ap.add_argument("--check", action="store_true", help="read each file back and check it")
    ap.add_argument("--twin", action="store_true", help="write sparse F16 twins (for llama-quantize --dry-run)")
    ap.add_argument("--force", action="store_true", help="write files that exist again")
    ap.add_argument("--list", action="store_true", help="print the shapes and their files")
    args = ap.parse_args()
    names = args.shapes or list(SHAPES)
    for n in names:
        if n not in SHAPES:
            sys.exit(f"synth: unknown shape {n!r}; shapes: {', '.join(SHAPES)}")
    if args.layers is not None and args.layers < 1:
        sys.exit("synth: --layers must be at least 1")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    failed = False
    for n in names:
        s = SHAPES[n]
        n_layer = args.layers or s.n_layer
        path = out / (s.file_name(args.layers) if not args.twin else f"twin-{s.file_name(args.layers)}")
        if args.list:
            print(f"{n}\t{path}")
            continue
        if args.force or not path.exists():
            tok = shape_tokenizer(s, args)
            if args.twin:
                write_twin(s, path, n_layer, tok)
            else:
                write_model(s, path, n_layer, args.seed, tok)
            print(f"synth: wrote {path} ({path.stat().st_size / 2**20:.1f} MiB)", file=sys.stderr)
        if args.check and not args.twin:
            problems = check_model(s, path, n_layer)
            for p in problems:
                print(f"synth: {path.name}: {p}", file=sys.stderr)
            failed |= bool(problems)
            if not problems:
                print(f"synth: {path.name}: checked (metadata, tensors, Q4_K_M types, dequantized samples)",
                      file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
