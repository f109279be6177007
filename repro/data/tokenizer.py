"""Tokenizers (HF `tokenizers`): a byte-level BPE trained on a pool's documents, or a given one."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from repro.errors import ReproError

EOS = "<|endoftext|>"
EOS_CANDIDATES = (EOS, "<|end_of_text|>", "</s>", "<eos>", "[SEP]")
MIN_BPE_VOCAB = 257  # 256 byte symbols + the EOS token


def train_bpe(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """Byte-level BPE with `vocab_size` entries, EOS first (id 0)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def is_local_tokenizer(file_or_name: str) -> bool:
    """Whether `file_or_name` means a local tokenizer (a tokenizer.json file or a pool folder)
    rather than a Hugging Face hub name (NAME or ORG/NAME). It is local when it exists, ends with
    .json, starts with / . or ~, holds a backslash or more than one /, or when the part before its
    / is an existing folder (data/pools/x where data/ exists); anything else is a hub name."""
    if Path(file_or_name).expanduser().exists() or file_or_name.endswith(".json"):
        return True
    if file_or_name.startswith(("/", ".", "~")) or "\\" in file_or_name:
        return True
    head, slash, _ = file_or_name.partition("/")
    return file_or_name.count("/") > 1 or (bool(slash) and Path(head).is_dir())


def load_tokenizer(file_or_name: str) -> Tokenizer:
    """A tokenizer.json file, a pool folder holding one, or a hub name (e.g.
    meta-llama/Meta-Llama-3-8B); is_local_tokenizer tells which. A local path that does not exist
    is an error, never a hub request."""
    if not is_local_tokenizer(file_or_name):
        return _from_hub(file_or_name)
    path = Path(file_or_name).expanduser()
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise ReproError(
            f"tokenizer file {str(path)!r} does not exist; give an existing tokenizer.json or pool "
            "folder, or a hub name as NAME or ORG/NAME"
        )
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:
        raise ReproError(
            f"{path} is not a valid tokenizer.json ({type(exc).__name__}); "
            "give an HF tokenizers file"
        ) from exc


def _from_hub(name: str) -> Tokenizer:
    """The tokenizer of hub model `name` (needs the network unless it is cached)."""
    try:
        return Tokenizer.from_pretrained(name)
    except Exception as exc:
        raise ReproError(
            f"cannot load tokenizer {name!r} from the hub "
            f"({str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__}); "
            "check the name and the network, or pass a tokenizer.json path"
        ) from exc


def eos_id(tokenizer: Tokenizer) -> int:
    """Id of the end-of-text token that separates documents."""
    for token in EOS_CANDIDATES:
        token_id = tokenizer.token_to_id(token)
        if token_id is not None:
            return token_id
    raise ReproError(
        f"the tokenizer has no end-of-text token (looked for {', '.join(EOS_CANDIDATES)}); "
        "add one or use another tokenizer"
    )


def tokenizer_sha256(tokenizer: Tokenizer) -> str:
    return hashlib.sha256(tokenizer.to_str().encode()).hexdigest()
