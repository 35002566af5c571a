"""Enlace's tokenizers and the files they are saved as.

- `sentencepiece.py`: the trained SentencePiece `Tokenizer`, `train_tokenizer`, `load_tokenizer`
  (either kind, from a folder or a run's checkpoint);
- `byte_level.py`: the `ByteTokenizer` of the smoke runs (ids 0..255 are UTF-8 bytes);
- `special_tokens.py`: the special tokens, named once for both tokenizers and the chat format;
- `chat_template.py`: the chat template every saved tokenizer carries;
- `files.py`: the files a tokenizer is saved as (Hugging Face's three, the SentencePiece model,
  Enlace's description).
"""

from enlace_data.tokenizer.byte_level import BYTE_TOKENIZER_ID, ByteTokenizer
from enlace_data.tokenizer.chat_template import CHAT_TEMPLATE
from enlace_data.tokenizer.files import DESCRIPTION_FILE, MODEL_FILE, TOKENIZER_FILES
from enlace_data.tokenizer.sentencepiece import (
    ENCODING_RULES,
    SPECIAL_TOKENS,
    Tokenizer,
    load_tokenizer,
    tokenizer_dir,
    train_tokenizer,
)

__all__ = [
    "BYTE_TOKENIZER_ID",
    "CHAT_TEMPLATE",
    "DESCRIPTION_FILE",
    "ENCODING_RULES",
    "MODEL_FILE",
    "SPECIAL_TOKENS",
    "TOKENIZER_FILES",
    "ByteTokenizer",
    "Tokenizer",
    "load_tokenizer",
    "tokenizer_dir",
    "train_tokenizer",
]
