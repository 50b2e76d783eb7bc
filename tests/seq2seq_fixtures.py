"""Tiny encoder-decoder pieces built in code (no Hub): a word-level fast tokenizer with T5's special tokens
(``<pad>`` 0, ``</s>`` 1, ``<unk>`` 2; every sequence ends with ``</s>``) and tiny random T5 / mT5 / BART configs."""

from __future__ import annotations

from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
from tokenizers.models import WordLevel
from transformers import BartConfig, MT5Config, PreTrainedTokenizerFast, T5Config

from .conftest import WORDS

SPECIALS = ("<pad>", "</s>", "<unk>")
EXTRA_WORDS = ("question", "context", ":", ".", ",", "?", "unknownia", "capital", "thames", "rhine")


def seq2seq_tokenizer() -> PreTrainedTokenizerFast:
    """A lower-casing word-level tokenizer over the test vocabulary, with character offsets (the processor needs
    them) and ``</s>`` appended as T5's tokenizer does."""
    vocab = {token: i for i, token in enumerate(dict.fromkeys((*SPECIALS, *WORDS, *EXTRA_WORDS)))}
    backend = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    backend.normalizer = normalizers.Lowercase()
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", vocab["</s>"])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        model_max_length=128,
        model_input_names=["input_ids", "attention_mask"],
    )


#: a tiny T5-family model (T5 and mT5 alike)
T5_SIZES = {
    "d_model": 32,
    "d_kv": 16,
    "d_ff": 48,
    "num_decoder_layers": 2,
    "num_heads": 2,
    "relative_attention_num_buckets": 8,
    "relative_attention_max_distance": 16,
    "dropout_rate": 0.0,
    "pad_token_id": 0,
    "eos_token_id": 1,
    "decoder_start_token_id": 0,
}


def t5_config(vocab_size: int, layers: int = 2) -> T5Config:
    return T5Config(vocab_size=vocab_size, num_layers=layers, **T5_SIZES)


def mt5_config(vocab_size: int, layers: int = 2) -> MT5Config:
    """T5 v1.1's gated-GELU feed-forward and untied LM head, as mT5 checkpoints have."""
    return MT5Config(vocab_size=vocab_size, num_layers=layers, **T5_SIZES)


def bart_config(vocab_size: int, layers: int = 2) -> BartConfig:
    return BartConfig(
        vocab_size=vocab_size,
        d_model=32,
        encoder_layers=layers,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=48,
        decoder_ffn_dim=48,
        max_position_embeddings=128,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=1,
        decoder_start_token_id=1,
        forced_eos_token_id=None,
    )


SEQ2SEQ_CONFIGS = {"t5": t5_config, "mt5": mt5_config, "bart": bart_config}
