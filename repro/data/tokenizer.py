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


def load_tokenizer(file_or_name: str) -> Tokenizer:
    """A tokenizer.json path, a pool directory holding one, or a hub name
    (e.g. meta-llama/Meta-Llama-3-8B)."""
    path = Path(file_or_name)
    if path.is_dir() and (path / "tokenizer.json").exists():
        path = path / "tokenizer.json"
    if path.is_file():
        try:
            return Tokenizer.from_file(str(path))
        except Exception as exc:
            raise ReproError(
                f"{path} is not a valid tokenizer.json ({type(exc).__name__}); "
                "give an HF tokenizers file"
            ) from exc
    if path.suffix == ".json" or file_or_name.startswith((".", "/")):
        raise ReproError(f"tokenizer file {file_or_name!r} does not exist")
    try:
        return Tokenizer.from_pretrained(file_or_name)
    except Exception as exc:
        raise ReproError(
            f"cannot load tokenizer {file_or_name!r} from the hub "
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
