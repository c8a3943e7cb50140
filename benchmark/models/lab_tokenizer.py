"""The tokenizer of the generated lab targets: byte-level BPE, written as Hugging Face `tokenizer.json` +
`tokenizer_config.json` (chat template included) with the standard library only (the lab generates the pair
before anything else is installed, so no `tokenizers` / `transformers` here). See README.md "The tokenizer".

Vocabulary layout (ids), for a preset with vocabulary V and the bigram map's closed set S = [s_start, s_end):
    [0, s_start)        special tokens: <s> </s> <pad> <|system|> <|user|> <|assistant|> <|end|>, then reserved
    [s_start, s_end)    S, what the target ever predicts: the 94 printable ASCII characters, then multi-character
                        tokens (" a".." Z", "aa".."zz", " aa".., "aaa"..), every one valid UTF-8 on its own
    [s_end, s_end+162)  the other 162 bytes (whitespace, control, 0x80-0xff): any text can be spelled
    [s_end+162, V)      more multi-character tokens
Multi-character tokens are prefix-closed (every token minus its last character is a token) and the BPE merge of
each is (token[:-1], token[-1]) ranked by length, so every token is reachable and text -> ids -> text is exact
(byte-level BPE is lossless; the ByteLevel decoder inserts nothing, and clean-up of spaces is off).
"""

from __future__ import annotations

import json
import string
from collections.abc import Iterator

SPECIALS = ("<s>", "</s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>")
BOS, EOS, PAD = SPECIALS[0], SPECIALS[1], SPECIALS[2]
PRINTABLE = tuple(chr(c) for c in range(0x21, 0x7F))  # 94 characters: each a token of S
# roles render as <|role|>; a role without its own special token is spelled out in bytes (still lossless)
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|' + message['role'] + '|>' + message['content'] + '<|end|>' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|assistant|>' -}}{%- endif -%}"
)
MODEL_MAX_LENGTH = 163840  # the targets' max_position_embeddings


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table, which the ByteLevel pre-tokenizer and decoder use."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs), strict=True))


def _multi_char_tokens() -> Iterator[str]:
    """Prefix-closed candidates, shortest first: ' a'..' Z', 'aa'..'zz', ' aa'..' zz', 'aaa'..'zzz', ' aaa'.."""
    lower, letters = string.ascii_lowercase, string.ascii_lowercase + string.ascii_uppercase
    yield from (" " + c for c in letters)
    yield from (a + b for a in lower for b in lower)
    yield from (" " + a + b for a in lower for b in lower)
    yield from (a + b + c for a in lower for b in lower for c in lower)
    yield from (" " + a + b + c for a in lower for b in lower for c in lower)


def token_texts(vocab: int, s_start: int, s_size: int) -> list[str]:
    """The text of every id (index = id): see the module docstring for the layout."""
    other_bytes = [chr(b) for b in range(256) if not 0x21 <= b < 0x7F]  # 162; chr(b) stands for the byte b
    if s_start < len(SPECIALS) or s_size < len(PRINTABLE) or vocab < s_start + s_size + len(other_bytes):
        raise ValueError(f"vocab {vocab}, S [{s_start}, {s_start + s_size}): too small for the tokenizer layout "
                         f"(needs s_start >= {len(SPECIALS)}, |S| >= {len(PRINTABLE)}, "
                         f"vocab >= s_end + {len(other_bytes)})")
    words = _multi_char_tokens()
    texts = list(SPECIALS) + [f"<|reserved_{i}|>" for i in range(len(SPECIALS), s_start)]
    texts += PRINTABLE
    texts += [next(words) for _ in range(s_size - len(PRINTABLE))]
    texts += other_bytes
    texts += [next(words) for _ in range(vocab - len(texts))]
    return texts


def _byte_level(text: str, table: dict[int, str]) -> str:
    if len(text) == 1 and ord(text) < 256:  # a single byte (0x80-0xff stand for themselves, not for UTF-8)
        return table[ord(text)]
    return "".join(table[b] for b in text.encode("utf-8"))


def whitespace_ids(vocab: int, s_start: int, s_size: int) -> list[int]:
    """Ids whose text is only ASCII whitespace (all of them single bytes outside S)."""
    texts = token_texts(vocab, s_start, s_size)
    return [i for i, t in enumerate(texts) if i >= s_start and t.isascii() and t.isspace()]


def tokenizer_json(vocab: int, s_start: int, s_size: int) -> dict:
    table = bytes_to_unicode()
    texts = token_texts(vocab, s_start, s_size)
    n_special = s_start
    model_vocab: dict[str, int] = {}
    merges: list[str] = []
    for i, t in enumerate(texts):
        piece = t if i < n_special else _byte_level(t, table)
        model_vocab[piece] = i
        if i >= n_special and len(t) > 1:
            merges.append((len(t), i, f"{_byte_level(t[:-1], table)} {_byte_level(t[-1], table)}"))
    added = [{"id": i, "content": texts[i], "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i in range(n_special)]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": byte_level, "post_processor": None, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": model_vocab, "merges": [m for _, _, m in sorted(merges)]},
    }


def tokenizer_config() -> dict:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS, "pad_token": PAD,
        "add_bos_token": False, "add_eos_token": False, "clean_up_tokenization_spaces": False,
        "model_max_length": MODEL_MAX_LENGTH, "chat_template": CHAT_TEMPLATE,
    }


def tokenizer_files(vocab: int, s_start: int, s_size: int) -> dict[str, str]:
    """File name -> content, for the target directory."""
    return {
        "tokenizer.json": json.dumps(tokenizer_json(vocab, s_start, s_size), ensure_ascii=False) + "\n",
        "tokenizer_config.json": json.dumps(tokenizer_config(), indent=1) + "\n",
        "special_tokens_map.json": json.dumps({"bos_token": BOS, "eos_token": EOS, "pad_token": PAD}, indent=1)
        + "\n",
    }
