"""A real `OpenAIServingChat` / `OpenAIServingTokenize` over a small in-memory Hugging Face
tokenizer with a ChatML template (no download). The tokenizer manager is a namespace: the
conversion path reads only its tokenizer, model config and server args."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat
from sglang.srt.entrypoints.openai.serving_tokenize import OpenAIServingTokenize
from sglang.srt.parser.template_manager import TemplateManager
from sglang.srt.server_args import ServerArgs
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

WORDS = (
    "<unk> <|im_start|> <|im_end|> system user assistant you are a helpful agent summarize "
    "the tool output file read done"
).split()
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }} {{ m['content'] }}<|im_end|> {% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant {% endif %}"
)


def make_tokenizer() -> PreTrainedTokenizerFast:
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", eos_token="<|im_end|>"
    )
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tokenizer.chat_template = CHATML
    return tokenizer


def make_tokenizer_manager() -> Any:
    return SimpleNamespace(
        tokenizer=make_tokenizer(),
        model_config=SimpleNamespace(
            is_multimodal=False,
            get_default_sampling_params=dict,
            hf_config=SimpleNamespace(model_type="qwen3", architectures=["Qwen3ForCausalLM"]),
            vocab_size=len(WORDS),
            context_len=4096,
        ),
        config_value=lambda name: None,
        server_args=ServerArgs(model_path="dummy"),
        preferred_sampling_params=None,
    )


def make_chat_serving() -> tuple[OpenAIServingChat, OpenAIServingTokenize]:
    manager = make_tokenizer_manager()
    templates = TemplateManager()
    return OpenAIServingChat(manager, templates), OpenAIServingTokenize(manager, templates)
