"""The layers of docs/architecture.md hold: every source file and public header includes only its
own layer and the layers before it (kernels nothing from attention/ or above, decode/ nothing
from train/, ...). An include that runs against the order fails here, naming file and line."""
import re
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]

# The order of docs/architecture.md's table: a layer may use the layers before it.
LAYERS = ["core", "kernels", "attention", "tensor", "autodiff", "nn", "models", "data", "viz",
          "metrics", "train", "decode", "bundle", "serve", "cli"]

PUBLIC_HEADER_LAYER = {
    "attn_core.h": "core", "attn_kernels.h": "kernels", "attn_rnn.h": "kernels",
    "attn_attention.h": "attention", "attn_tensor_file.h": "tensor",
    "attn_autodiff.h": "autodiff", "attn_nn.h": "nn", "attn_models.h": "models",
    "attn_data.h": "data", "attn_viz.h": "viz", "attn_metrics.h": "metrics",
    "attn_optim.h": "train", "attn_trainer.h": "train", "attn_decode.h": "decode",
    "attn_bundle.h": "bundle", "attn_serve.h": "serve", "attn.h": "cli",
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of_include(target):
    if target.startswith("attn/"):
        return PUBLIC_HEADER_LAYER.get(target[len("attn/"):])
    folder = target.split("/")[0]
    return folder if folder in LAYERS else None


def files_with_layers():
    for path in sorted((_ROOT / "src").glob("*/*.[ch]")):
        yield path, path.parent.name
    for path in sorted((_ROOT / "include" / "attn").glob("*.h")):
        yield path, PUBLIC_HEADER_LAYER[path.name]


def test_every_public_header_has_a_layer():
    headers = {p.name for p in (_ROOT / "include" / "attn").glob("*.h")}
    assert headers == set(PUBLIC_HEADER_LAYER), headers ^ set(PUBLIC_HEADER_LAYER)
    folders = {p.name for p in (_ROOT / "src").iterdir() if p.is_dir()}
    assert folders == set(LAYERS), folders ^ set(LAYERS)


def test_no_include_runs_against_the_layers():
    wrong = []
    for path, layer in files_with_layers():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            match = INCLUDE.match(line)
            if not match:
                continue
            target_layer = layer_of_include(match.group(1))
            if target_layer is None:
                continue  # same-folder or generated headers
            if LAYERS.index(target_layer) > LAYERS.index(layer):
                wrong.append(f"{path.relative_to(_ROOT)}:{number}: {layer} includes "
                             f"{match.group(1)} ({target_layer})")
    assert not wrong, "\n".join(wrong)
