"""The decoder-only transformer's shape. Names here are the names in checkpoints' model.json."""

from collections.abc import Iterator

from pydantic import Field, PositiveFloat, PositiveInt

from enlace_config.schema.base import FieldProblem, StrictModel


class ModelConfig(StrictModel):
    # The upper bounds are far beyond any model this project trains, and refuse at start-up what
    # would otherwise fail deep inside torch (a typo such as an extra zero or two).
    vocab_size: PositiveInt = Field(..., le=2**20)
    """Number of token ids (256 for byte-level)."""
    context_length: PositiveInt = Field(..., le=2**20)
    """Longest sequence the model attends over."""
    d_model: PositiveInt = Field(..., le=65536)
    """Width of the residual stream."""
    n_layers: PositiveInt = Field(..., le=1024)
    """Number of transformer blocks."""
    n_heads: PositiveInt = Field(..., le=1024)
    """Query heads per attention layer."""
    n_kv_heads: PositiveInt = Field(..., le=1024)
    """Key/value heads (grouped-query attention)."""
    ffn_hidden: PositiveInt = Field(..., le=2**18)
    """Hidden width of the SwiGLU MLP."""
    rope_theta: PositiveFloat = 10000.0
    """Rotary embedding base."""
    norm_eps: PositiveFloat = 1e-6
    """RMSNorm epsilon."""
    qk_norm: bool = True
    """RMSNorm over q and k per head, before the rotation."""
    qk_norm_gain_init: PositiveFloat = Field(default=1.0, le=100)
    """qk_norm: initial value of the q and k norms' gains. With gains g every attention logit is
    bounded by g² √head_dim: at 1 (√32 ≈ 5.7) attention is too flat to pick one position out of a
    hundred, and a small model cannot copy until the gains grow (issue 35). The gains are the
    q/k-norm weights, so the export carries them as they are."""
    conv_layers: list[int] = Field(default_factory=list[int])
    """Indices of the layers whose token mixer is LFM2's gated short convolution instead of
    attention (Liquid AI's LFM2 layout, which transformers and llama.cpp run): each position mixes
    itself and the `conv_kernel - 1` positions before it, so the layers above can match a key of
    several bytes without first learning a previous-token head (issue 35)."""
    conv_kernel: int = Field(default=3, ge=2, le=16)
    """Width of the short convolution (LFM2's `conv_L_cache`): the position and the ones before it."""
    tie_embeddings: bool = True
    """Share the token embedding and the LM head."""
    init_std: PositiveFloat = 0.02
    """Std of the normal initialisation."""

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def _problems(self) -> Iterator[FieldProblem]:
        if self.d_model % self.n_heads:
            yield FieldProblem(
                "n_heads",
                f"{self.n_heads} heads do not divide d_model {self.d_model}: the head width "
                "d_model / n_heads must be a whole number",
                ("d_model",),
            )
        elif self.head_dim % 2:
            yield FieldProblem(
                "n_heads",
                f"head dim d_model / n_heads = {self.d_model} / {self.n_heads} = {self.head_dim} "
                "is odd; rotary embeddings (RoPE) rotate pairs of dimensions, so it must be even",
                ("d_model",),
            )
        bad = [i for i in self.conv_layers if not 0 <= i < self.n_layers]
        if bad or len(set(self.conv_layers)) != len(self.conv_layers):
            yield FieldProblem(
                "conv_layers",
                f"{self.conv_layers} must be distinct layer indices from 0 to n_layers - 1 = "
                f"{self.n_layers - 1}",
                ("n_layers",),
            )
        if self.conv_layers and not self.qk_norm:
            yield FieldProblem(
                "conv_layers",
                "short-convolution layers make the model LFM2's layout (what transformers and "
                "llama.cpp run), whose attention always has QK-norm, but qk_norm is false: set "
                "model.qk_norm: true (the gains' start, qk_norm_gain_init, sets the temperature)",
                ("qk_norm",),
            )
        if self.n_heads % self.n_kv_heads:
            yield FieldProblem(
                "n_kv_heads",
                f"{self.n_kv_heads} key/value heads do not divide n_heads {self.n_heads}: "
                "grouped-query attention shares each key/value head among a whole number of "
                "query heads",
                ("n_heads",),
            )
