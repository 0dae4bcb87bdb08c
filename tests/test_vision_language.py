"""Vision-language policies (issue 30, class 3) through the real command on a real Qwen2-VL checkpoint
(fixtures/_build_vlm.py: Qwen2VLForConditionalGeneration with a vision tower, tiny random weights).

TRL builds a VLM from its checkpoint's own architecture (trl/trainer/utils.py create_model_from_path:
`config.architectures[0]`), which no AutoModelForCausalLM mapping covers. Before, four rules crashed building a causal-LM
twin (`error`, exit 1 on a setup that trains), the estimate had no model, and peft-setup said `pass` "not checked",
hiding a LoRA target that matches nothing. Then the meta-device model became the whole VLM and the twin rules said
`skip`. Now the miniature twin is a VLM too (its language model and vision tower shrunk, multimodal rope refitted), so
the smoke step, the logits and termination probes run the trainer on it, with the dataset's images through the model
folder's processor (which needs torchvision: without it those rules say `skip` and why); context-length counts each
image's tokens as the processor expands them, and the estimate the vision tower's activations.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import check_here, result_of, run_json

FOLDER = "vision-language"


def _statuses(report: dict) -> dict[str, str]:
    return {r["rule"]: r["status"] for r in report["results"]}


def _torchvision() -> str | None:
    """Why a VLM processor cannot load here (its video processor needs torchvision), or None."""
    import os

    try:
        import torchvision  # noqa: F401
    except Exception as exc:  # noqa: BLE001  (PyPI's CUDA torchvision fails to import beside a CPU torch)
        if os.environ.get("TRL_DOCTOR_REQUIRE_TORCHVISION"):  # CI's vision lane: this must run, not skip
            raise
        return f"torchvision does not import here ({type(exc).__name__}): CI's vision lane runs this"
    return None


def _trl_builds_vlms() -> bool:
    """Whether the installed TRL builds a model path by its own architecture (trl/trainer/utils.py
    create_model_from_path); before, GRPOTrainer loads every path with AutoModelForCausalLM, which has no VLM."""
    import trl.trainer.utils

    return hasattr(trl.trainer.utils, "create_model_from_path")


def _stops_at_init_as_trl_does(report: dict) -> None:
    """On a TRL that loads paths with AutoModelForCausalLM, the job stops at the trainer's construction; the smoke
    step says so with TRL's own error (the legacy lane's trl 0.15.2)."""
    smoke = result_of(report, "smoke-step")
    assert smoke["status"] == "fail", smoke
    assert "Unrecognized configuration class" in smoke["message"] and "AutoModelForCausalLM" in smoke["message"], smoke


@pytest.mark.slow
def test_a_healthy_text_only_vlm_setup_runs_the_trainer_on_the_vlm_twin(built_fixtures):
    """Text prompts on a Qwen2-VL policy: the trainer runs on the VLM twin (before: smoke-step and logits-contract
    said `skip`, no twin for a VLM), and only the language model's tensors move (no image reaches the tower)."""
    code, report = run_json("check", str(built_fixtures / FOLDER / "ok_qwen2vl_text.yaml"))
    if not _trl_builds_vlms():
        _stops_at_init_as_trl_does(report)
        return
    statuses = _statuses(report)
    assert "error" not in statuses.values(), report["results"]
    assert code == 0, statuses
    for rule in ("smoke-step", "logits-contract", "eos-termination"):
        assert statuses[rule] == "pass", result_of(report, rule)
    smoke = result_of(report, "smoke-step")["message"]
    assert "miniature twin of Qwen2VL" in smoke, smoke
    updated, total = (int(n) for n in smoke.split(" trainable tensors")[0].rsplit(" ", 1)[1].split("/"))
    assert 0 < updated < total, smoke  # the vision tower's tensors got no gradient from text


@pytest.mark.slow
def test_the_smoke_step_trains_the_vision_tower_on_the_datasets_images(built_fixtures):
    """An image dataset (an `image` column beside conversational prompts with an image part, as TRL's grpo_vlm.py
    makes): the step runs with the rows' images through the model folder's processor, and every tensor moves, the
    vision tower's included. Where the processor cannot load (torchvision missing), the three rules that run the
    trainer say `skip`, naming torchvision, and nothing fails."""
    code, report = run_json("check", str(built_fixtures / FOLDER / "ok_qwen2vl_images.yaml"))
    statuses = _statuses(report)
    if not _trl_builds_vlms() and result_of(report, "smoke-step")["status"] != "skip":  # the processor loaded
        _stops_at_init_as_trl_does(report)
        return
    assert "error" not in statuses.values() and "fail" not in statuses.values(), report["results"]
    assert code == 0, statuses
    smoke = result_of(report, "smoke-step")
    if _torchvision() is not None:
        for rule in ("smoke-step", "logits-contract"):
            r = result_of(report, rule)
            assert r["status"] == "skip" and "needs torchvision" in r["message"], r
        pytest.skip(_torchvision())
    assert smoke["status"] == "pass", smoke
    updated, total = (int(n) for n in smoke["message"].split(" trainable tensors")[0].rsplit(" ", 1)[1].split("/"))
    assert updated == total, smoke["message"]  # the images reached the tower: its tensors moved too
    assert statuses["logits-contract"] == "pass", result_of(report, "logits-contract")


def _image_rows(folder: Path, height: int, width: int, n: int = 4) -> Path:
    """A parquet dataset of `n` rows, each a `height` x `width` picture and a conversational prompt with an image
    part, as TRL's VLM examples shape theirs."""
    import datasets
    from PIL import Image

    rows = [{"image": Image.new("RGB", (width, height), (200, 30 + i, 30)),
             "prompt": [{"role": "user", "content": [{"type": "image", "text": None},
                                                     {"type": "text", "text": f"What is shown in picture {i}?"}]}]}
            for i in range(n)]
    part = {"type": datasets.Value("string"), "text": datasets.Value("string")}
    features = datasets.Features({"image": datasets.Image(),
                                  "prompt": [{"role": datasets.Value("string"), "content": [part]}]})
    out = folder / "images.parquet"
    datasets.Dataset.from_list(rows, features=features).to_parquet(str(out))
    return out


def _text_tokens(model: Path, row_prompt: list) -> int:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model))
    text = tok.apply_chat_template(row_prompt, add_generation_prompt=True, tokenize=False)
    return len(tok(text, add_special_tokens=False)["input_ids"])


def _uncountable_here() -> str | None:
    """Why images cannot be counted where the tests run, as the doctor says it, or None: transformers releases
    whose Qwen2-VL image processor has no Pillow backend (5.17, the vLLM lane's) need torchvision for it too."""
    from transformers import AutoImageProcessor

    try:
        AutoImageProcessor.from_pretrained(str(Path(__file__).resolve().parents[1] / "fixtures" / "models" / "qwen2vl-tiny"),
                                           local_files_only=True)
    except ImportError as exc:
        return str(exc)
    return None


def _assert_said_uncountable(r: dict) -> None:
    """Where images cannot be counted here, context-length says so and a pass on the text becomes a skip."""
    assert r["details"]["image tokens"].startswith("not counted: ") and "torchvision" in r["details"]["image tokens"], r
    assert r["status"] in ("skip", "warn", "fail"), r


def test_context_length_counts_each_images_tokens(built_fixtures, tmp_path):
    """A 511 x 511 picture is 18 x 18 = 324 tokens on Qwen2-VL's processor (resized to 504 x 504: patches of 14,
    merged 2 x 2), not the one `<|image_pad|>` the rendered text holds: with max_completion_length 200 the text
    alone fits the fixture's 512 positions, the image tokens do not, and the rule warns as it does for any prompt past a
    rotary model's positions (before: a pass on the text's tokens alone)."""
    pytest.importorskip("PIL")
    data = _image_rows(tmp_path, 511, 511)
    model = built_fixtures / "models" / "qwen2vl-tiny"
    recipe = (built_fixtures / FOLDER / "ok_qwen2vl_images.yaml").read_text()
    (tmp_path / "cfg.yaml").write_text(recipe.replace("../models/qwen2vl-tiny", str(model))
                                       .replace("../models/vlm-images/train.parquet", str(data))
                                       .replace("max_completion_length: 16", "max_completion_length: 200"))
    import shutil

    shutil.copy(built_fixtures / FOLDER / "rewards.py", tmp_path / "rewards.py")
    code, report = check_here(str(tmp_path / "cfg.yaml"), "--select", "context-length", "--no-smoke")
    r = result_of(report, "context-length")
    if _uncountable_here():
        _assert_said_uncountable(r)
        assert r["status"] == "skip" and "could not be counted here" in r["message"], r  # the text alone fits
        return
    text = _text_tokens(model, [{"role": "user", "content": [{"type": "image"},
                                                             {"type": "text", "text": "What is shown in picture 0?"}]}])
    assert text + 200 <= 512  # the text alone would fit
    assert r["details"]["image tokens"].startswith("1296 for the 4 images"), r["details"]
    assert r["details"]["prompt tokens"].startswith(f"max {text + 323} "), (r["details"], text)
    # rotary positions past the table warn (a learned table fails): the rule's own severity, images or not
    assert code == 0 and r["status"] == "warn", r
    longest = text + 323
    assert r["message"].startswith(f"the longest prompt is {longest} tokens"), r["message"]
    assert f"completions longer than {512 - longest} tokens" in r["message"], r["message"]


def test_context_length_counts_the_fixtures_images_as_the_processor_does(built_fixtures):
    """84 x 56 pictures: 3 x 2 = 6 tokens each, 5 more than their placeholder; the measured length is the text's
    own token count (rendered by the fixture's template, tokenized here) plus those 5."""
    pytest.importorskip("PIL")
    code, report = run_json("check", str(built_fixtures / FOLDER / "ok_qwen2vl_images.yaml"), "--select",
                            "context-length", "--no-smoke")
    r = result_of(report, "context-length")
    if _uncountable_here():
        _assert_said_uncountable(r)
        return
    assert code == 0 and r["status"] == "pass", r
    assert r["details"]["image tokens"].startswith("48 for the 8 images of `image`"), r["details"]
    longest = _text_tokens(built_fixtures / "models" / "qwen2vl-tiny", [{"role": "user", "content": [
        {"type": "image"}, {"type": "text", "text": "Is the blue block left of the green one?"}]}])
    assert r["details"]["prompt tokens"].startswith(f"max {longest + 5} "), (r["details"], longest)


def test_the_estimate_counts_the_vision_towers_activations_on_image_rows(built_fixtures):
    """A full fine-tune trains the tower: its activations over each sequence's image patches (6 tokens × 2² merged
    patches = 24 here) join the language model's; under LoRA the frozen tower keeps none."""
    pytest.importorskip("PIL")
    code, report = run_json("check", str(built_fixtures / FOLDER / "ok_qwen2vl_images.yaml"), "--select",
                            "gpu-capacity", "--target", "1xA100-80GB", "--no-smoke")
    r = result_of(report, "gpu-capacity")
    assert code == 0 and r["status"] == "pass", r
    if _uncountable_here():  # the tower's activations are left out, and the assumptions say why
        assert any("vision tower: activations not counted" in a for a in r["details"]["assumptions"]), r["details"]
        return
    assert r["details"]["estimate inputs"]["image patches per sequence"].startswith("24 "), r["details"]["estimate inputs"]
    assert "the vision tower's 2 × 24 image patches × 2 blocks × (6·32 + 4·64)" in r["details"]["memory breakdown"]["activations"], r["details"]


@pytest.mark.parametrize("family", ["Qwen2VLConfig", "Qwen2_5_VLConfig", "Qwen3VLConfig", "Gemma3Config", "LlavaConfig"])
def test_the_twin_of_each_vlm_family_builds_and_runs(family):
    """The twin of each family's default (full-size) config: built by the class that builds the candidate, a few
    hundred thousand parameters, multimodal rope sections refitted to the twin's heads; the Qwen families run a
    forward and backward with an image through the vision tower."""
    import torch
    import transformers

    from trl_doctor.context.twin import build_twin, twin_config

    if not hasattr(transformers, family):
        pytest.skip(f"transformers {transformers.__version__} predates {family}")
    cfg = getattr(transformers, family)()
    text = cfg.get_text_config()
    text.vocab_size = 1000
    rope = {"rope_type": "default", "mrope_section": [16, 24, 24], "rope_theta": 1e6}
    if family.startswith("Qwen"):
        for attr in ("rope_parameters", "rope_scaling"):
            if hasattr(text, attr):
                setattr(text, attr, dict(rope))
        cfg.image_token_id, cfg.vision_start_token_id, cfg.vision_end_token_id, cfg.video_token_id = 10, 11, 12, 13
    cfg.architectures = [family.replace("Config", "ForConditionalGeneration")]
    model = build_twin(cfg)
    assert type(model).__name__ == cfg.architectures[0]
    assert sum(p.numel() for p in model.parameters()) < 2_000_000
    small = twin_config(cfg).get_text_config()
    sections = (getattr(small, "rope_parameters", None) or getattr(small, "rope_scaling", None) or {}).get("mrope_section")
    if family.startswith("Qwen"):
        assert sections is not None and sum(sections) == small.head_dim // 2 if getattr(small, "head_dim", None) \
            else sum(sections) == small.hidden_size // small.num_attention_heads // 2, sections
        vision = model.config.vision_config
        size = vision.patch_size
        pixels = torch.randn(16, 3 * vision.temporal_patch_size * size * size)
        ids = torch.tensor([[1, 11] + [10] * 4 + [12, 5, 6]])
        kwargs = {"mm_token_type_ids": (ids == 10).long()} if _takes(model, "mm_token_type_ids") else {}
        out = model(input_ids=ids, pixel_values=pixels, image_grid_thw=torch.tensor([[1, 4, 4]]), **kwargs)
        out.logits.sum().backward()
        tower = [p for n, p in model.named_parameters() if "visual" in n]
        assert tower and all(p.grad is not None for p in tower)


def _takes(model, name: str) -> bool:
    import inspect

    return name in inspect.signature(model.forward).parameters


def _parameters_in_checkpoint(folder: Path) -> tuple[int, int]:
    """(all parameters, the vision tower's) as the checkpoint's safetensors header lists them."""
    header = folder / "model.safetensors"
    with header.open("rb") as f:
        size = int.from_bytes(f.read(8), "little")
        tensors = json.loads(f.read(size))
    total = vision = 0
    for name, info in tensors.items():
        if name == "__metadata__":
            continue
        n = 1
        for d in info["shape"]:
            n *= d
        total += n
        vision += n if "visual" in name else 0
    return total, vision


def test_the_estimate_counts_the_vision_tower(built_fixtures):
    code, report = run_json("check", str(built_fixtures / FOLDER / "ok_qwen2vl_text.yaml"), "--select",
                            "gpu-capacity", "--target", "1xA100-80GB", "--no-smoke")
    r = result_of(report, "gpu-capacity")
    assert code == 0 and r["status"] == "pass", r
    total, vision = _parameters_in_checkpoint(built_fixtures / "models" / "qwen2vl-tiny")
    assert vision > 0
    counted = r["details"]["estimate inputs"]["policy parameters"]
    assert counted.startswith(f"{total:,} "), (counted, total, vision)


def test_lora_targets_are_judged_against_the_vlms_modules(built_fixtures):
    code, report = run_json("check", str(built_fixtures / FOLDER / "ok_qwen2vl_lora.yaml"), "--select", "peft-setup",
                            "--no-smoke")
    r = result_of(report, "peft-setup")
    assert code == 0 and r["status"] == "pass", r
    assert "q_proj, v_proj match modules of Qwen2VLForConditionalGeneration" in r["message"]

    code, report = run_json("check", str(built_fixtures / FOLDER / "bad_qwen2vl_lora_no_match.yaml"), "--select",
                            "peft-setup", "--no-smoke")
    r = result_of(report, "peft-setup")
    assert code == 1 and r["status"] == "fail", r
    assert "'query_key_value'" in r["message"] and "matches no module" in r["message"], r["message"]


@pytest.mark.release_free
def test_peft_setup_skips_when_the_model_cannot_be_built(built_fixtures, tmp_path):
    """A part of the LoRA setup the doctor could not judge is a skip with the reason, never a pass: an encoder-decoder
    checkpoint (T5) that no causal-LM class builds leaves the LoRA targets unread (before: `pass` "not checked")."""
    import shutil

    from transformers import T5Config

    model = tmp_path / "model"
    shutil.copytree(built_fixtures / "models" / "qwen2-chat", model)
    config = T5Config(vocab_size=320, d_model=32, d_ff=64, num_layers=2, num_heads=2, d_kv=16).to_dict()
    config["architectures"] = ["T5ForConditionalGeneration"]
    (model / "config.json").write_text(json.dumps(config))
    recipe = (built_fixtures / FOLDER / "ok_qwen2vl_lora.yaml").read_text()
    (tmp_path / "cfg.yaml").write_text(recipe.replace("../models/qwen2vl-tiny", str(model))
                                       .replace("../data/prompts.jsonl", str(built_fixtures / "data" / "prompts.jsonl")))
    shutil.copy(built_fixtures / FOLDER / "rewards.py", tmp_path / "rewards.py")
    code, report = check_here(str(tmp_path / "cfg.yaml"), "--select", "peft-setup", "--no-smoke")
    r = result_of(report, "peft-setup")
    assert r["status"] == "skip", r
    assert r["message"].startswith(f"LoRA on the base model {model} not judged: target modules "), r["message"]
