"""What keplm needs to know about each encoder family: where its transformer blocks are (and how often a shared block
runs), which two modules of a block KALA's KFM modulates, where its FFN lies (TRELM's knowledge routing), and its
hidden dropout. Every family-specific name lives here; a family keplm cannot serve is refused with a ValueError
saying why."""

from __future__ import annotations

from torch import nn

#: the two modules of a block whose outputs KFM modulates (KALA eq. 1), in execution order, by block class. Post-LN
#: blocks: the LayerNorms after attention and after the FFN. Pre-LN blocks: the pre-norms of the
#: attention and MLP sub-blocks, i.e. their normalised inputs (the residual stream itself is not modulated), so a token
#: with no entity still reads exactly what the encoder computes. A class not listed here is a post-LN block if it
#: holds exactly two LayerNorms (``nn.LayerNorm`` or a family's own ``*LayerNorm`` class), taken in registration order.
MODULATED_NORMS = {
    "AlbertLayer": ("attention.LayerNorm", "full_layer_layer_norm"),  # registered in the other order
    "TransformerBlock": ("sa_layer_norm", "output_layer_norm"),  # DistilBERT
    "ModernBertEncoderLayer": ("attn_norm", "mlp_norm"),  # pre-LN; layer 0's attn_norm is an Identity
    "XLMRobertaXLLayer": ("attention.self_attn_layer_norm", "LayerNorm"),  # pre-LN
    "MegatronBertLayer": ("attention.ln", "ln"),  # pre-LN
    # encoder-decoder models: KFM in the encoder only, the decoder stays stock
    "T5Block": ("layer.0.layer_norm", "layer.1.layer_norm"),  # pre-LN (RMS norms); encoder blocks: attention, FFN
    "MT5Block": ("layer.0.layer_norm", "layer.1.layer_norm"),  # pre-LN, as T5
    "BartEncoderLayer": ("self_attn_layer_norm", "final_layer_norm"),  # post-LN
}
#: pre-LN block classes (of ``MODULATED_NORMS``): KFM modulates the sub-blocks' normalised inputs
PRE_LN_BLOCKS = ("ModernBertEncoderLayer", "XLMRobertaXLLayer", "MegatronBertLayer", "T5Block", "MT5Block")

#: FFN of a block by class, for TRELM's knowledge routing: (module whose output is the post-activation intermediate
#: state, the first linear layer, the second), as attribute paths inside the block. Not listed: BERT naming
#: (``intermediate`` / ``intermediate.dense`` / ``output.dense``).
FFN_PATHS = {
    "TransformerBlock": ("ffn.activation", "ffn.lin1", "ffn.lin2"),  # DistilBERT
}
#: families whose FFN knowledge routing refuses, and why
NO_ROUTING = {
    "AlbertLayer": "ALBERT shares one block across its layers, so there are no per-layer FFN neurons to route",
    "ModernBertEncoderLayer": "ModernBERT's gated MLP (one Wi holding input and gate halves) has no BERT-style "
    "intermediate neurons to route",
}

#: families whose blocks cannot run as ``ExtraLayers`` on top of the encoder (Roof-Transformer's roof, KALA's
#: "+ more params" baseline), and why
NO_EXTRA_LAYERS = {
    "ModernBertEncoderLayer": "ModernBERT's blocks read rotary position embeddings and a per-layer attention type from "
    "the encoder, so they cannot be stacked as extra layers (a roof) on its output",
}


def check_extra_layers(block: nn.Module) -> None:
    """ValueError if blocks of this class cannot be stacked on the encoder's output (``NO_EXTRA_LAYERS``)."""
    name = type(block).__name__
    if name in NO_EXTRA_LAYERS:
        raise ValueError(f"extra transformer layers of {name}: {NO_EXTRA_LAYERS[name]}")


def hidden_dropout(encoder_config) -> float:
    """The encoder's dropout on hidden states, whatever its family calls it (0.1 where it has none)."""
    for name in ("hidden_dropout_prob", "dropout", "hidden_dropout", "mlp_dropout", "dropout_rate"):
        value = getattr(encoder_config, name, None)
        if isinstance(value, (int, float)):
            return float(value)
    return 0.1


def initializer_range(encoder_config) -> float:
    """The standard deviation the encoder's family draws new weights with: ``initializer_range`` (BERT-likes),
    ``init_std`` (BART), ``initializer_factor`` x 0.02 (T5, which scales its own draws by the factor)."""
    for name in ("initializer_range", "init_std"):
        value = getattr(encoder_config, name, None)
        if isinstance(value, (int, float)):
            return float(value)
    return 0.02 * float(getattr(encoder_config, "initializer_factor", 1.0))


def is_encoder_decoder(config) -> bool:
    """Whether a model config is an encoder-decoder's (T5, BART, ...): KFM goes into its encoder only."""
    return bool(getattr(config, "is_encoder_decoder", False))


def text_encoder(model: nn.Module) -> nn.Module:
    """The module that encodes the input text: an encoder-decoder model's encoder stack (``get_encoder()``: T5's
    ``encoder``, BART's ``model.encoder``), any other encoder itself."""
    config = getattr(model, "config", None)
    if is_encoder_decoder(config) and callable(getattr(model, "get_encoder", None)):
        encoder = model.get_encoder()
        if encoder is model:
            raise ValueError(f"{type(model).__name__} is an encoder-decoder model without an encoder module")
        return encoder
    return model


def check_seq2seq(config) -> None:
    """ValueError unless ``config`` is an encoder-decoder model's (a sequence-to-sequence model needs a decoder)."""
    if not is_encoder_decoder(config):
        kind = (
            "decoder-only"
            if getattr(config, "is_decoder", False) or getattr(config, "model_type", "") in _DECODER_ONLY
            else "encoder-only"
        )
        raise ValueError(
            f"a {getattr(config, 'model_type', type(config).__name__)!r} checkpoint is {kind}: KALA's "
            "conditional generation needs an encoder-decoder model (T5, BART, ...), whose encoder gets "
            "KFM and whose decoder generates"
        )


#: decoder-only families named in :func:`check_seq2seq`'s error (any other non encoder-decoder is called encoder-only)
_DECODER_ONLY = ("gpt2", "gpt_neo", "gptj", "llama", "mistral", "qwen2", "opt", "bloom", "falcon", "phi", "gemma")


def encoder_blocks(encoder: nn.Module, depth: int | None = None) -> list[nn.Module]:
    """The block each of the encoder's ``depth`` layer applications runs, in order. A family that shares blocks
    (ALBERT) names the same module several times: the i-th entry is the block its i-th pass runs. For an
    encoder-decoder model: its encoder's blocks (:func:`text_encoder`)."""
    depth = encoder.config.num_hidden_layers if depth is None else depth
    encoder = text_encoder(encoder)
    groups = getattr(getattr(encoder, "encoder", None), "albert_layer_groups", None)
    if groups is not None:  # ALBERT: layer i runs group int(i / (depth / num_groups)), each of its inner layers
        if any(len(group.albert_layers) != 1 for group in groups):
            raise ValueError("ALBERT with inner_group_num != 1 runs several blocks per layer; keplm supports one")
        return [groups[int(i / (depth / len(groups)))].albert_layers[0] for i in range(depth)]
    for module in encoder.modules():
        if isinstance(module, nn.ModuleList) and len(module) == depth:
            return list(module)
    raise ValueError(f"could not find the {depth} transformer layers of {type(encoder).__name__}")


def _is_layer_norm(module: nn.Module) -> bool:
    return isinstance(module, nn.LayerNorm) or type(module).__name__.endswith("LayerNorm")


def modulated_norms(block: nn.Module) -> list[nn.Module]:
    """The two modules of ``block`` whose outputs KFM modulates, in execution order (see ``MODULATED_NORMS``)."""
    name = type(block).__name__
    if name in MODULATED_NORMS:
        return [block.get_submodule(path) for path in MODULATED_NORMS[name]]
    norms = [m for m in block.modules() if _is_layer_norm(m)]
    if len(norms) != 2:
        raise ValueError(
            f"{name} has {len(norms)} LayerNorms: no pair of LayerNorms to modulate (KFM needs a post-LN "
            "block with two, or a pre-LN block keplm knows)"
        )
    return norms


def ffn_paths(block: nn.Module) -> tuple[nn.Module, tuple[nn.Module, str], tuple[nn.Module, str]]:
    """(module whose output is the FFN's post-activation intermediate state, (parent, name) of the FFN's first linear
    layer, (parent, name) of its second) of a block, for TRELM's knowledge routing."""
    name = type(block).__name__
    if name in NO_ROUTING:
        raise ValueError(f"knowledge routing does not support {name}: {NO_ROUTING[name]}")
    hook, first, second = FFN_PATHS.get(name, ("intermediate", "intermediate.dense", "output.dense"))

    def parent_and_name(path):
        parent, _, attribute = path.rpartition(".")
        owner = block.get_submodule(parent) if parent else block
        return owner, attribute

    try:
        linears = [parent_and_name(first), parent_and_name(second)]
        hook_module = block.get_submodule(hook)
    except AttributeError:
        linears, hook_module = [], None
    if hook_module is None or not all(isinstance(getattr(o, a, None), nn.Linear) for o, a in linears):
        raise ValueError(
            f"knowledge routing needs BERT-style FFN layers (intermediate.dense / output.dense); {name} has none"
        )
    return hook_module, linears[0], linears[1]


def encoder_prefix(model: nn.Module, name: str) -> str:
    """The parameter-name prefix of encoder ``name`` in ``model`` (with the base-model prefix if any)."""
    return f"{model.base_model_prefix}.{name}" if model.base_model is not model else name


__all__ = [
    "MODULATED_NORMS",
    "PRE_LN_BLOCKS",
    "FFN_PATHS",
    "NO_EXTRA_LAYERS",
    "check_extra_layers",
    "hidden_dropout",
    "initializer_range",
    "is_encoder_decoder",
    "text_encoder",
    "check_seq2seq",
    "encoder_blocks",
    "modulated_norms",
    "ffn_paths",
    "encoder_prefix",
]
