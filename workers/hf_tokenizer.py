"""A registered model's Hugging Face tokenizer, as the gateway needs it to predict vLLM's hashes.

vLLM tokenizes a completion prompt with the model's tokenizer (``add_special_tokens`` true by
default: the post-processor adds BOS) and a chat request by rendering the model's chat
template (jinja2, sandboxed, ``trim_blocks`` and ``lstrip_blocks`` as transformers does)
and encoding the text without special tokens. This module does the same from the model's
files alone: ``tokenizer.json`` (the ``tokenizers`` library, not transformers: the gateway
stays light) and ``tokenizer_config.json`` (chat template and special tokens).

``load_tokenizer(path)`` accepts the model directory or the ``tokenizer.json`` itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer


class TokenizerUnavailable(Exception):
    """The path holds no usable tokenizer (missing, unreadable or malformed files)."""


def _special(config: dict[str, Any], name: str) -> str:
    value = config.get(name)
    if isinstance(value, dict):  # AddedToken as saved by transformers
        value = value.get("content")
    return value if isinstance(value, str) else ""


def _raise(message: str) -> None:
    raise jinja2.TemplateError(message)


def _text(content: Any) -> str | None:
    """A message's content as vLLM flattens it: a string, or its text parts joined by newlines."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                return None  # images and audio: not tokenized here
            if not isinstance(part.get("text"), str):
                return None
            parts.append(part["text"])
        return "\n".join(parts)
    return None


@dataclass(frozen=True)
class HfTokenizer:
    """One model's tokenizer and chat template; callable as a ``request_hashing.Tokenize``."""

    tokenizer: Tokenizer
    chat_template: jinja2.Template | None
    special: dict[str, str]

    def encode(self, text: str, *, add_special_tokens: bool) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)

    def __call__(self, body: dict[str, Any], kind: str) -> list[int] | None:
        def flag(name: str, default: bool) -> bool:
            value = body.get(name, default)
            return value if isinstance(value, bool) else default

        if kind == "chat":
            return self._chat(body, flag)
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            return self.encode(prompt, add_special_tokens=flag("add_special_tokens", True))
        if isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt):
            return list(prompt)
        return None

    def _chat(self, body: dict[str, Any], flag: Any) -> list[int] | None:
        messages = body.get("messages")
        if self.chat_template is None or not isinstance(messages, list) or not messages:
            return None
        rendered = []
        for message in messages:
            if not isinstance(message, dict) or set(message) - {"role", "content", "name"}:
                return None  # tool calls and other fields: the template may use them
            content = _text(message.get("content"))
            if content is None or not isinstance(message.get("role"), str):
                return None
            rendered.append({**message, "content": content})
        try:
            text = self.chat_template.render(
                messages=rendered,
                add_generation_prompt=flag("add_generation_prompt", True),
                continue_final_message=flag("continue_final_message", False),
                **self.special,
            )
        except jinja2.TemplateError:
            return None
        return self.encode(text, add_special_tokens=flag("add_special_tokens", False))


def load_tokenizer(path: str) -> HfTokenizer:
    """The tokenizer under ``path`` (model directory or ``tokenizer.json``); raises
    :class:`TokenizerUnavailable` with the reason."""
    where = Path(path)
    directory = where if where.is_dir() else where.parent
    tokenizer_file = directory / "tokenizer.json" if where.is_dir() else where
    try:
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
    except Exception as exc:  # the Rust loader raises plain Exception subclasses
        raise TokenizerUnavailable(f"{tokenizer_file}: {exc}") from None
    config: dict[str, Any] = {}
    config_file = directory / "tokenizer_config.json"
    if config_file.exists():
        try:
            config = json.loads(config_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise TokenizerUnavailable(f"{config_file}: {exc}") from None
    source = config.get("chat_template")
    template_file = directory / "chat_template.jinja"
    if source is None and template_file.exists():
        source = template_file.read_text(encoding="utf-8")
    template = None
    if isinstance(source, str):
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        env.globals["raise_exception"] = _raise
        try:
            template = env.from_string(source)
        except jinja2.TemplateError as exc:
            raise TokenizerUnavailable(f"chat template: {exc}") from None
    special = {
        name: _special(config, name)
        for name in ("bos_token", "eos_token", "unk_token", "pad_token")
    }
    return HfTokenizer(tokenizer=tokenizer, chat_template=template, special=special)
