"""Model facts: where a model reference resolves (a local folder or the hub cache, never a download) and how
many parameters a model holds."""

from __future__ import annotations

from .._config import resolve_artifact
from .._twin import parameter_count

__all__ = ["parameter_count", "resolve_artifact"]


def score_rows(folder) -> int | None:
    """Rows of a sequence classifier's head (`score.weight`, `classifier.weight`) in the checkpoint's safetensors,
    read from the file headers only (no weights); None when there is none to read. A config may leave num_labels at
    its default of 2 over a 1-row head, which `num_labels=1` (TRL's example scripts) loads as it is."""
    import glob
    import os

    try:
        from safetensors import safe_open
    except ImportError:
        return None
    for file in sorted(glob.glob(os.path.join(str(folder), "*.safetensors"))):
        try:
            with safe_open(file, framework="pt") as f:
                for key in f.keys():
                    if key.endswith(("score.weight", "classifier.weight")):
                        return int(f.get_slice(key).get_shape()[0])
        except Exception:
            continue
    return None
