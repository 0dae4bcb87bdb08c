"""Facts about a vision-language job's images: which dataset columns hold them, the processor that turns them into
the model's inputs, and how many tokens one image becomes in the sequence the trainer builds.

Heavy imports (datasets, transformers) happen inside the functions."""

from __future__ import annotations

from typing import Any

from trl_doctor.cache import fact
from trl_doctor.errors import Unavailable


def image_columns(dataset: Any) -> list[str]:
    """The columns whose feature is an image, or a list of images (TRL reads `image` and `images`)."""
    import datasets

    features = getattr(dataset, "features", None) or {}

    def holds_image(feature) -> bool:
        if isinstance(feature, datasets.Image):
            return True
        inner = getattr(feature, "feature", None)  # Sequence / List of images
        if inner is not None:
            return holds_image(inner)
        return isinstance(feature, list) and len(feature) == 1 and holds_image(feature[0])

    return [name for name, feature in features.items() if holds_image(feature)]


def load_processor(path: Any) -> Any:
    """The model folder's processor, as TRL loads it for a vision-language model (`AutoProcessor.from_pretrained`).
    Unavailable, with the reason, where it cannot load on this machine (a library its image or video processor
    needs, torchvision or Pillow, or a missing file)."""
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(str(path), local_files_only=True)
    except ImportError as exc:
        missing = _missing_library(exc)
        raise Unavailable(f"the dataset's images go through the processor of {path}, which needs {missing}, not "
                          f"installed where trl-doctor runs (the launch machine needs it too): install it here to "
                          "run the trainer on the images") from None
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise Unavailable(f"the processor of {path} does not load: {type(exc).__name__}: {str(exc)[:300]}") from None


@fact
def processor(ctx) -> Any:
    """The policy folder's processor, loaded once per check (its tokenizer load is the dear part): the trainer run,
    context-length and the estimate share it. Unavailable as `load_processor` says."""
    return load_processor(ctx.config.model.path)


def _missing_library(exc: ImportError) -> str:
    text = str(exc)
    for name in ("Torchvision", "PIL", "Pillow", "av", "decord"):
        if name in text:
            return {"Torchvision": "torchvision", "PIL": "Pillow"}.get(name, name)
    return f"a library transformers names ({' '.join(text.split())[:200]})"


def image_tokens(processor: Any, height: int, width: int) -> int | None:
    """How many tokens one image of `height` x `width` pixels becomes in the prompt, as the processor counts them
    (transformers' `_get_num_multimodal_tokens`, the count vLLM also reads), or None where it does not say."""
    count = getattr(processor, "_get_num_multimodal_tokens", None)
    if count is None:
        return None
    try:
        data = count(image_sizes=[(height, width)])
    except Exception:  # a processor whose count needs more than the sizes: unknown, not a guess
        return None
    tokens = getattr(data, "num_image_tokens", None) or (data.get("num_image_tokens") if isinstance(data, dict) else None)
    return int(tokens[0]) if tokens else None


def image_counter(ctx) -> tuple[Any, str | None]:
    """A function (height, width) -> tokens one image becomes, as the model folder's processor counts it, and None;
    or None and why it cannot be counted here. The whole processor is tried first (transformers'
    `_get_num_multimodal_tokens`); where it does not load (its video processor needs torchvision), the image
    processor alone, for processors that merge patches (Qwen2-VL's family: patches / merge_size²)."""
    try:
        whole = processor(ctx)
    except Unavailable as exc:
        why = str(exc)
        whole = None
    if whole is not None:
        if image_tokens(whole, 28, 28) is not None:
            return (lambda h, w: image_tokens(whole, h, w)), None
        why = f"{type(whole).__name__} does not say how many tokens an image becomes"
    from transformers import AutoImageProcessor

    try:
        images = getattr(whole, "image_processor", None) or AutoImageProcessor.from_pretrained(
            str(ctx.config.model.path), local_files_only=True)
    except Exception as exc:  # noqa: BLE001  (any failure: the count stays unknown, with why)
        return None, f"{why}; its image processor does not load either ({type(exc).__name__})"
    merge = getattr(images, "merge_size", None)
    patches = getattr(images, "get_number_of_image_patches", None)
    if merge and patches is not None:
        return (lambda h, w: int(patches(h, w, {})) // (merge * merge)), None
    resize = _smart_resize(images)
    if merge and resize is not None:  # transformers releases before the count API: the family's own resize
        return (lambda h, w: _merged_tokens(resize(h, w), images.patch_size, merge)), None
    return None, why


def _smart_resize(images: Any):
    """(height, width) -> the size Qwen2-VL's image processor resizes to, from its own module's `smart_resize`
    (transformers 4.x, whose processors lack the token-count API), or None."""
    import importlib

    try:
        module = importlib.import_module(type(images).__module__)
    except ImportError:
        return None
    resize = getattr(module, "smart_resize", None)
    patch, merge = getattr(images, "patch_size", None), getattr(images, "merge_size", None)
    low, high = getattr(images, "min_pixels", None), getattr(images, "max_pixels", None)
    if resize is None or not (patch and merge and low and high):
        return None
    return lambda h, w: resize(h, w, factor=patch * merge, min_pixels=low, max_pixels=high)


def _merged_tokens(size: tuple[int, int], patch: int, merge: int) -> int:
    height, width = size
    return (height // patch) * (width // patch) // (merge * merge)


def image_sizes(dataset: Any, column: str, indices: list[int]) -> list[list[tuple[int, int]]]:
    """The (height, width) of each image of the rows at `indices`, read from the images' headers (no decoding)."""
    import io
    import os

    import datasets
    from PIL import Image

    feature = dataset.features[column]
    raw = datasets.Image(decode=False)
    listed = not isinstance(feature, datasets.Image)
    values = dataset.cast_column(column, [raw] if listed else raw).select(indices)[column]
    out = []
    for value in values:
        sizes = []
        for item in (value or []) if listed else [value]:
            if not item:
                continue
            data, path = item.get("bytes"), item.get("path")
            if not data and not (path and os.path.isfile(path)):  # a path that is no regular file is not opened
                raise ValueError(f"row image {path!r} is neither stored bytes nor a file")
            with Image.open(io.BytesIO(data) if data else path) as img:
                sizes.append((img.height, img.width))
        out.append(sizes)
    return out
