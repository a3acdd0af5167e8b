"""Build the tiny random-weight Llama the real-vLLM tests serve (run by vLLM's interpreter).

``python build_model.py OUT_DIR``: a byte-level BPE tokenizer trained with ``tokenizers``
on local text (the Python standard library's own sources, fixed files), a ``LlamaConfig``
with hidden size 128 and 2 layers, random weights from a fixed seed, all written with
``save_pretrained``. No hub access. The same interpreter and inputs give the same files.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# A simple chat template (vLLM renders it with jinja2, as the gateway does).
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SPECIAL = ["<unk>", "<s>", "</s>"]
CORPUS_MODULES = ("textwrap", "argparse", "json.decoder", "this", "string")


def corpus() -> list[str]:
    import importlib

    lines: list[str] = []
    for name in CORPUS_MODULES:
        module = importlib.import_module(name)
        lines += Path(module.__file__ or "").read_text(encoding="utf-8").splitlines()
    return lines


def main(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(0)
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=2048,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(corpus(), trainer=trainer)
    bos = bpe.token_to_id("<s>")
    bpe.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.model_max_length = 4096
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out)
    config = LlamaConfig(
        vocab_size=bpe.get_vocab_size(),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=4096,
        bos_token_id=bos,
        eos_token_id=bpe.token_to_id("</s>"),
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    LlamaForCausalLM(config).save_pretrained(out, safe_serialization=True)
    (out / "cacheplane-tiny.json").write_text(json.dumps({"built_by": __file__}), "utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
