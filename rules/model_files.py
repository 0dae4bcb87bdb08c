"""TD017 model-files: every model the trainer loads has its weights, whole.

What it does
    For the policy, `reward_model_name_or_path`, `reward_model_path`, `value_model_path` and
    `sft_model_path` (local folders or cached snapshots) it finds the weights (the safetensors
    index and its shards, `model.safetensors`, `pytorch_model*.bin`, never opened) and reads each
    safetensors header only: every tensor's byte range must fit its shape and dtype and the file. A
    140 GB checkpoint takes milliseconds. A broken or missing file fails; no weights at all warns
    (a config-only copy is normal off the launch machine).

Why is this bad?
    The other rules build models on the meta device or as a tiny twin and never read the weights;
    the job does, at start-up, after its processes started, its GPUs are held and vLLM began
    loading: a cut-short file stops `from_pretrained` with "SafetensorError: Error while
    deserializing header: MetadataIncompleteBuffer" (or "incomplete metadata, file not fully
    covered"); a missing shard with "OSError: ... does not appear to have a file named
    model-00002-of-00004.safetensors"; a folder with no weights (a tokenizer-only save, a
    `--include "*.json"` download) with "does not appear to have a file named model.safetensors".

Example
    model_name_or_path: qwen2-truncated  # model.safetensors cut short
    -> fail: the policy's weights in .../qwen2-truncated are broken: model.safetensors: cut short:
       59,232 of 118,464 bytes (its header describes 26 tensors): from_pretrained stops at
       start-up, after the job has taken its GPUs

Fix safety
    No automatic fix (the doctor never downloads or rewrites weights): a manual fix names the file
    to copy or download again (`huggingface-cli download REPO --include FILE`, or the copy
    command's source).
"""

from __future__ import annotations

from pathlib import Path

from trl_doctor import InputError, fail, manual, passed, rule, skip, warn
from trl_doctor.facts.inputs.models import resolve_artifact
from trl_doctor.facts.weights import weights

OTHER_MODELS = (("reward_model_name_or_path", "reward model"), ("reward_model_path", "reward model"),
                ("value_model_path", "value model"), ("sft_model_path", "SFT model"))


@rule(
    id="TD017",
    slug="model-files",
    title="Every model the trainer loads has its weights, and no weight file is cut short",
    trainers=("grpo", "rloo", "ppo"),
    fixable="never",
    static_skip="it reads the weights' headers against the model",
)
def check(ctx):
    folders = _folders(ctx)
    if not folders:
        yield skip("no model folder to read: the trainer's models come from the script's own objects")
        return
    for role, folder in folders:
        yield _judge(role, folder)


def _folders(ctx) -> list[tuple[str, Path]]:
    cfg = ctx.config
    out: list[tuple[str, Path]] = []
    if cfg.model.path.is_dir():
        out.append(("policy", cfg.model.path))
    for key, role in OTHER_MODELS:
        ref = cfg.get(key)  # a path as the file writes it (relative to the file)
        if not isinstance(ref, str) or not ref:
            continue
        try:
            folder = resolve_artifact(ref, cfg.base_dir, str(cfg.path), key, need="config.json").path
        except InputError:
            continue  # not here (a hub id the launch downloads): nothing to read
        if folder.is_dir() and all(folder != f for _, f in out):
            out.append((role, folder))
    return out


def _judge(role: str, folder: Path):
    w = weights(folder)
    details = {"folder": str(folder), "format": w.format, "files": [f.name for f in w.files]}
    if w.problems:
        listed = "; ".join(f"{p.name}: {why}" for p, why in w.problems[:3])
        more = f" (and {len(w.problems) - 3} more)" if len(w.problems) > 3 else ""
        return fail(f"the {role}'s weights in {folder} are broken: {listed}{more}: from_pretrained stops at "
                    "start-up, after the job has taken its GPUs", fix=manual(
                        f"copy or download again: {', '.join(p.name for p, _ in w.problems)} (e.g. "
                        f"`huggingface-cli download REPO --include {w.problems[0][0].name}`)"), **details)
    if w.format == "none":
        return warn(f"the {role} folder {folder} holds no weights (no model.safetensors, shards or "
                    "pytorch_model.bin): the launch fails in from_pretrained unless the launch machine's copy has "
                    "them", fix=manual("copy the checkpoint's weight files into the folder (or point the config at "
                                       "the full checkpoint)"), **details)
    if w.format == "pickle":
        return passed(f"the {role} has pickle weights ({', '.join(f.name for f in w.files)}), not opened by the "
                      "doctor", **details)
    details["tensors"] = w.tensors
    return passed(f"the {role}'s {w.format} weights are whole: {w.tensors} tensors, {w.nbytes / 2**20:,.1f} MiB "
                  f"in {len([f for f in w.files if f.suffix == '.safetensors'])} file(s)", **details)
