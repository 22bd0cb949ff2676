"""Build the tiny random-weight Llama that the vLLM tests serve (nothing is downloaded).

Run with the vLLM venv's interpreter (it has torch, transformers and tokenizers)::

    python tests/real_servers/build_tiny_llama.py OUT_DIR

OUT_DIR then holds what ``vllm serve OUT_DIR`` needs: ``config.json`` and
``model.safetensors`` of a ``LlamaForCausalLM`` (hidden 64, 2 heads of head_dim 32 — vLLM's
CPU attention rejects head_dim 16 —, 2 layers, intermediate 128, 2,048 positions, bfloat16,
random weights from a fixed seed), and a 2,048-token byte-level BPE trained here on generated
text, saved as a ``PreTrainedTokenizerFast`` with ``<s>``/``</s>`` and a chat template
(``tokenizer.json`` is also what a scenario's ``tokenizer:`` reads). The output is the same on
every run (seeded); it says nothing meaningful — the tests need its shape, not its words.
Writes ``.complete`` last, so a half-built folder is recognisable.

``--shape HIDDEN,HEADS,LAYERS,INTERMEDIATE`` builds another width with the same tokenizer: the
vLLM lab serves ``256,4,2,768`` (tests/real_servers/vllm_server.py ``LAB_MODEL_SHAPE``), where a
900-token prefill costs tens of ms — on the 64-wide model it costs under 1 ms, so no storm of
long prompts could slow the running streams.
"""

from __future__ import annotations

import os
import random
import sys

VOCAB_SIZE = 2048
HIDDEN = 64
HEADS = 2  # head_dim = HIDDEN / HEADS = 32
LAYERS = 2
INTERMEDIATE = 128
MAX_POSITIONS = 2048
SEED = 27
#: Sentences of generated text the BPE is trained on.
CORPUS_SENTENCES = 20_000
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")
CHAT_TEMPLATE = ("{{ bos_token }}{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}"
                 "{{ eos_token }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}")


def _corpus(rng: random.Random):
    """Sentences of pseudo-words (syllables of the lowercase alphabet), plus digits and punctuation."""
    syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"] + list("aeiou")
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(5000)]
    for _ in range(CORPUS_SENTENCES):
        yield " ".join(rng.choice(words) for _ in range(rng.randint(4, 20))) + rng.choice([".", "?", "!", ","]) \
            + (f" {rng.randint(0, 9999)}" if rng.random() < 0.1 else "")


def build_tokenizer(out_dir: str):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(_corpus(random.Random(SEED)), trainer=trainer)
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>",
                                      unk_token="<unk>", pad_token="</s>", model_max_length=MAX_POSITIONS)
    wrapped.chat_template = CHAT_TEMPLATE
    wrapped.save_pretrained(out_dir)
    return wrapped


def build_model(out_dir: str, tokenizer, shape: tuple[int, int, int, int] | None = None) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    hidden, heads, layers, intermediate = shape or (HIDDEN, HEADS, LAYERS, INTERMEDIATE)
    torch.manual_seed(SEED)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, num_attention_heads=heads,
                         num_key_value_heads=heads, num_hidden_layers=layers, intermediate_size=intermediate,
                         max_position_embeddings=MAX_POSITIONS, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         tie_word_embeddings=False, dtype="bfloat16")
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out_dir)


def main(argv: list[str]) -> int:
    shape = None
    if len(argv) == 3 and argv[1] == "--shape":
        shape = tuple(int(part) for part in argv[2].split(","))
        argv = argv[:1]
    if len(argv) != 1 or (shape is not None and len(shape) != 4):
        print(__doc__, file=sys.stderr)
        return 2
    out_dir = argv[0]
    os.makedirs(out_dir, exist_ok=True)
    tokenizer = build_tokenizer(out_dir)
    build_model(out_dir, tokenizer, shape)
    with open(os.path.join(out_dir, ".complete"), "w") as done:
        done.write("built\n")
    hidden, heads = shape[:2] if shape else (HIDDEN, HEADS)
    print(f"built {out_dir}: vocabulary {len(tokenizer)}, hidden {hidden}, head_dim {hidden // heads}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
