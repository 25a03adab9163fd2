"""The suite's stand-in tokenizer (importable as ``byte_tokenizer``: tests/conftest.py puts this
folder on ``sys.path``, since test modules cannot import one another under importlib mode)."""

from __future__ import annotations


class ByteTokenizer:
    """One token per character (its code point: a byte for ASCII text); the chat template is
    ``U:`` + content per message, then ``|A:`` when a generation prompt is asked for.
    ``chat_kwargs`` records the extra keyword arguments of each ``apply_chat_template`` call."""

    pad_token_id = 0  # NUL: no text encodes to it

    def __init__(self):
        self.chat_kwargs = []

    def __len__(self):  # the vocabulary, as a HF tokenizer's len(): bytes (the suite's texts are ASCII)
        return 256

    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids)

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True, **kwargs):
        self.chat_kwargs.append(kwargs)
        return self.encode("".join(f"U:{m['content']}" for m in messages) + ("|A:" if add_generation_prompt else ""))
