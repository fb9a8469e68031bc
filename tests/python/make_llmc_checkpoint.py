"""A random GPT-2 checkpoint in llm.c's format (train_gpt2.c's gpt2_build_from_checkpoint) and a
token file in llm.c's format (llmc/dataloader.h), with NumPy only, for attn convert's tests.

Checkpoint: 256 int32 (magic 20240326, version 3, maxT, V, L, NH, C, Vp, zeros), then float32
wte [Vp, C], wpe [maxT, C], ln1w [L, C], ln1b [L, C], qkvw [L, 3C, C], qkvb [L, 3C],
attprojw [L, C, C], attprojb [L, C], ln2w [L, C], ln2b [L, C], fcw [L, 4C, C], fcb [L, 4C],
fcprojw [L, C, 4C], fcprojb [L, C], lnfw [C], lnfb [C]. GPT-2's initialisation: weights
normal(0, 0.02), layer-norm gains 1, biases 0, the padded vocabulary rows V .. Vp-1 zero.

Tokens: 256 int32 (magic 20240520, version 1, count, zeros), then count uint16 tokens below V.

    /usr/bin/python3 tests/python/make_llmc_checkpoint.py OUT.bin [--tokens OUT_TOKENS.bin]
        [--layers 2] [--heads 4] [--channels 128] [--vocab 1000] [--padded-vocab 1024]
        [--max-t 128] [--count 4096] [--seed 0]
"""
import argparse

import numpy as np

CHECKPOINT_MAGIC, CHECKPOINT_VERSION = 20240326, 3
TOKENS_MAGIC, TOKENS_VERSION = 20240520, 1


def parameter_shapes(max_t, layers, channels, padded_vocab):
    """(name, shape) in the file's order."""
    C, L = channels, layers
    return [("wte", (padded_vocab, C)), ("wpe", (max_t, C)), ("ln1w", (L, C)), ("ln1b", (L, C)),
            ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)), ("attprojw", (L, C, C)),
            ("attprojb", (L, C)), ("ln2w", (L, C)), ("ln2b", (L, C)), ("fcw", (L, 4 * C, C)),
            ("fcb", (L, 4 * C)), ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)),
            ("lnfw", (C,)), ("lnfb", (C,))]


def random_parameters(layers, heads, channels, vocab, padded_vocab, max_t, seed):
    """{name: float32 array} with GPT-2's initialisation."""
    assert channels % heads == 0 and padded_vocab >= vocab
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in parameter_shapes(max_t, layers, channels, padded_vocab):
        if name in ("ln1w", "ln2w", "lnfw"):
            value = np.ones(shape)
        elif name.endswith("b"):
            value = np.zeros(shape)
        else:
            value = rng.normal(0.0, 0.02, shape)
        params[name] = value.astype(np.float32)
    params["wte"][vocab:] = 0.0
    return params


def write_checkpoint(path, params, layers, heads, channels, vocab, padded_vocab, max_t):
    header = np.zeros(256, np.int32)
    header[:8] = [CHECKPOINT_MAGIC, CHECKPOINT_VERSION, max_t, vocab, layers, heads, channels,
                  padded_vocab]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for name, _ in parameter_shapes(max_t, layers, channels, padded_vocab):
            f.write(params[name].astype("<f4").tobytes())


def write_tokens(path, tokens):
    header = np.zeros(256, np.int32)
    header[:3] = [TOKENS_MAGIC, TOKENS_VERSION, len(tokens)]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, "<u2").tobytes())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--tokens", help="also write this many --count random tokens here")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--channels", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--padded-vocab", type=int, default=1024)
    parser.add_argument("--max-t", type=int, default=128)
    parser.add_argument("--count", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0)
    a = parser.parse_args()
    params = random_parameters(a.layers, a.heads, a.channels, a.vocab, a.padded_vocab, a.max_t,
                               a.seed)
    write_checkpoint(a.out, params, a.layers, a.heads, a.channels, a.vocab, a.padded_vocab,
                     a.max_t)
    if a.tokens:
        rng = np.random.default_rng(a.seed + 1)
        write_tokens(a.tokens, rng.integers(0, a.vocab, a.count))


if __name__ == "__main__":
    main()
