"""Whether what the trainer saves can be saved: its output folder, its tokenizer's configuration and the model's.

`trainer.save_model()` and every checkpoint write the model's config.json and the processing class's
tokenizer_config.json into `output_dir`. They are written after the first `save_steps` steps or at the end of the run,
so a value that cannot be written (a `torch.dtype` a script passed to `AutoTokenizer.from_pretrained` with its model's
keyword arguments, which the tokenizer keeps in its init kwargs) or a folder that cannot be made stops the job after
the hours it trained. The tokenizer is saved here for real, with transformers' own `save_pretrained`, into a scratch
folder, without its vocabulary file (the slow part, milliseconds instead of a second for a 151k vocabulary, and
written from the tokenizer's own backend, never from the user's values).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def _not_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return True
    return False


def unsaveable_kwargs(tok: Any) -> list[str]:
    """The tokenizer's init kwargs that JSON cannot write, as 'name=value (type)'."""
    kwargs = getattr(tok, "init_kwargs", None) or {}
    out = []
    for key, value in kwargs.items():
        if type(value).__name__ == "AddedToken" or key in ("added_tokens_decoder", "name_or_path"):
            continue  # transformers writes these itself
        if _not_json(value):
            out.append(f"{key}={value!r} ({type(value).__module__}.{type(value).__qualname__})")
    return out


def tokenizer_save_error(tok: Any) -> str | None:
    """The error `tok.save_pretrained(...)` stops with, or None when it saves (its vocabulary file left out)."""
    if not hasattr(tok, "save_pretrained"):
        return None
    shadowed = "_save_pretrained" in vars(tok)
    previous = vars(tok).get("_save_pretrained")
    from trl_doctor.runtime import fence as _fence

    tok._save_pretrained = lambda *args, **kwargs: ()  # the vocabulary file: the backend's own, and the slow part
    try:
        with tempfile.TemporaryDirectory(prefix="trl-doctor-save-") as folder, \
                _fence.user_code("the tokenizer's save_pretrained (its class may be the model's own code)"):
            tok.save_pretrained(folder)
    except Exception as exc:  # what save_model will raise at the end of the run
        return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    finally:
        if shadowed:
            tok._save_pretrained = previous
        else:
            del tok._save_pretrained
    return None


def config_save_error(config: Any) -> str | None:
    """The error writing the model's config.json stops with, or None."""
    if config is None or not hasattr(config, "to_json_string"):
        return None
    try:
        config.to_json_string()
    except Exception as exc:
        return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    return None


def output_dir_problem(output_dir: str, base: Path) -> tuple[str | None, str]:
    """(what stops the first save, or None; how it was judged). A relative folder is judged here (it is the
    project's, wherever it runs); an absolute one only where it exists or its parent does on this machine."""
    path = Path(os.path.expanduser(output_dir))
    relative = not path.is_absolute()
    path = (base / path) if relative else path
    ancestor = path
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not relative and ancestor != path and ancestor == Path(ancestor.anchor):
        return None, f"{output_dir} does not exist on this machine: judged on the launch machine"
    if ancestor.exists() and not ancestor.is_dir():
        where = "is not a folder" if ancestor == path else f"cannot be made: {ancestor} is not a folder"
        return f"output_dir {output_dir} {where}: the first checkpoint cannot be written", ""
    if not os.access(ancestor, os.W_OK | os.X_OK):
        what = "is not writable" if ancestor == path else f"cannot be made: {ancestor} is not writable"
        return f"output_dir {output_dir} {what}: the first checkpoint cannot be written", ""
    return None, f"{path} {'exists and is writable' if ancestor == path else f'can be made in {ancestor}'}"
