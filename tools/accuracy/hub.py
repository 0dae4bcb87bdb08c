"""A stand-in Hugging Face cache for the accuracy harness: the hub ids a script names resolve, offline, to tiny local
stand-ins of the same family, so that its docstring's command runs unchanged (`--model_name_or_path
EleutherAI/pythia-1b-deduped`, a `load_dataset("trl-lib/tldr")` in the script's own code).

`build(home)` fills HF_HOME=`home` once: each model as the hub's cache holds it (hub/models--ORG--NAME, a snapshot
and refs/main), each dataset as `datasets` caches a prepared one (datasets/ORG___NAME/CONFIG/0.0.0/HASH, arrow files
and dataset_info.json), which `load_dataset` finds with HF_DATASETS_OFFLINE=1. Both the ground truth and the doctor
run with that HF_HOME: the machine a user checks on has the models in its cache.

The stand-ins keep what the harness's verdicts depend on: the architecture class, the tokenizer's special tokens
(Pythia's `<|endoftext|>`, no pad token; GPT-2's the same), an embedding matrix rounded up as Pythia's is (50304 rows
for 50277 tokens: TRL's PPO example adds a `[PAD]` without resizing), and the dataset's columns and splits.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures" / "models"


def _fixture_builder(name: str):
    """fixtures/<name>.py, the builder a stand-in shares its files with."""
    import importlib
    import sys

    folder = str(ROOT / "fixtures")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(name)

# hub id -> (how it is made, what it stands for)
MODELS = {
    "EleutherAI/pythia-1b-deduped": ("pythia", "GPTNeoXForCausalLM, Pythia's tokenizer layout"),
    "EleutherAI/pythia-160m": ("pythia", "TRL's PPOConfig default sft_model_path / reward_model_path"),
    "trl-lib/pythia-1b-deduped-tldr-sft": ("pythia", "GPTNeoXForCausalLM (TRL's TL;DR SFT model)"),
    "trl-lib/pythia-1b-deduped-tldr-rm": ("pythia-rm", "GPTNeoXForSequenceClassification, one label"),
    "cleanrl/EleutherAI_pythia-1b-deduped__sft__tldr": ("pythia", "GPTNeoXForCausalLM (TRL's PPO/RLOO TL;DR SFT model)"),
    "cleanrl/EleutherAI_pythia-1b-deduped__reward__tldr": ("pythia-rm", "GPTNeoXForSequenceClassification, one label"),
    "Qwen/Qwen2-0.5B-Instruct": ("fixture:qwen2-chat", "Qwen2ForCausalLM with Qwen's chat template"),
    "Qwen/Qwen2.5-0.5B-Instruct": ("fixture:qwen2-chat", "Qwen2ForCausalLM with Qwen's chat template"),
    "gpt2": ("fixture:gpt2-nopad", "GPT2LMHeadModel, no pad token, no chat template"),
    # students and teachers of TRL's distillation scripts (gkd.py, distillation.py), KTO's SFT model
    "Qwen/Qwen2-1.5B-Instruct": ("fixture:qwen2-chat", "Qwen2ForCausalLM with Qwen's chat template"),
    "Qwen/Qwen2.5-1.5B-Instruct": ("fixture:qwen2-chat", "Qwen2ForCausalLM with Qwen's chat template"),
    "trl-lib/qwen1.5-1.8b-sft": ("fixture:qwen2-chat", "Qwen2ForCausalLM (Qwen1.5's architecture) with a chat template"),
    "Qwen/Qwen2.5-Math-1.5B-Instruct": ("fixture:qwen2-chat", "Qwen2ForCausalLM with Qwen's chat template"),
    "Qwen/Qwen3-4B-Instruct-2507": ("qwen3:qwen3_instruct_2507:262144", "Qwen3ForCausalLM, a ChatML tokenizer (eos <|im_end|>, "
                                    "pad <|endoftext|>) with Qwen3-Instruct-2507's chat template"),
    "meta-llama/Llama-3.2-1B-Instruct": ("fixture:llama3-bos", "LlamaForCausalLM, Llama 3's byte-level tokenizer"),
    "Qwen/Qwen3-0.6B": ("qwen3:qwen3:40960", "Qwen3ForCausalLM, a ChatML tokenizer (eos <|im_end|>, pad <|endoftext|>) with "
                        "Qwen3's chat template (tools, <think>)"),
    "Qwen/Qwen3-4B": ("qwen3:qwen3:40960", "Qwen3ForCausalLM, a ChatML tokenizer (eos <|im_end|>, pad <|endoftext|>) with "
                      "Qwen3's chat template (tools, <think>)"),
    "Qwen/Qwen3-1.7B": ("qwen3:qwen3:40960", "Qwen3ForCausalLM, a ChatML tokenizer (eos <|im_end|>, pad <|endoftext|>) with "
                        "Qwen3's chat template (tools, <think>)"),
    # TRL's sentiment notebooks (examples/notebooks, trl <= 0.24): GPT-2 tuned on IMDB and a DistilBERT classifier
    "lvwerra/gpt2-imdb": ("fixture:gpt2-nopad", "GPT2LMHeadModel, GPT-2's tokenizer (no pad token)"),
    "lvwerra/gpt2-imdb-pos-v2": ("fixture:gpt2-nopad", "GPT2LMHeadModel, GPT-2's tokenizer (no pad token)"),
    "lvwerra/distilbert-imdb": ("distilbert-sentiment", "DistilBertForSequenceClassification, NEGATIVE/POSITIVE"),
    "Qwen/Qwen2.5-VL-3B-Instruct": ("qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration (vision tower, tied embeddings), "
                                    "Qwen2_5_VLProcessor: Qwen2VLImageProcessor, Qwen2VLVideoProcessor, Qwen2-VL's "
                                    "chat template"),
}


def _words(i: int, n: int) -> str:
    vocab = ["two", "three", "five", "seven", "sum", "list", "plus", "solve", "answer", "what", "world", "please"]
    return " ".join(vocab[(i * 7 + k * 5) % len(vocab)] for k in range(n))


def _tldr(i: int) -> dict:
    return {"prompt": f"SUBREDDIT: r/{_words(i, 1)}\nPOST: {_words(i, 12)}\nTL;DR:", "completion": f" {_words(i + 1, 6)}"}


def _sentiment(i: int) -> dict:
    return {"prompt": _words(i, 10), "chosen": _words(i + 1, 6), "rejected": _words(i + 2, 6)}


def _conversation_pair(i: int) -> dict:
    user = {"role": "user", "content": _words(i, 8) + "?"}
    return {"chosen": [user, {"role": "assistant", "content": _words(i + 1, 6)}],
            "rejected": [user, {"role": "assistant", "content": _words(i + 2, 6)}],
            "score_chosen": 8.0, "score_rejected": 3.0}


def _tldr_sft(i: int) -> dict:
    post = _tldr(i)
    return {"id": f"t3_{i}", "prompt": post["prompt"],
            "messages": [{"role": "user", "content": post["prompt"]}, {"role": "assistant", "content": post["completion"]}]}


def _hh_trl_style(i: int) -> dict:
    return {"prompt": [{"role": "user", "content": _words(i, 8) + "?"}],
            "chosen": [{"role": "assistant", "content": _words(i + 1, 6)}],
            "rejected": [{"role": "assistant", "content": _words(i + 2, 6)}]}


def _numina(i: int) -> dict:
    a, b = 2 + i % 17, 3 + i % 11
    problem = f"What is {a} plus {b}? {_words(i, 4)}"
    solution = f"{a} + {b} = {a + b}, so the answer is $\\boxed{{{a + b}}}$."
    return {"problem": problem, "solution": solution,
            "messages": [{"role": "user", "content": problem}, {"role": "assistant", "content": solution}]}


def _gsm8k(i: int) -> dict:
    a, b = 2 + i % 13, 5 + i % 7
    return {"question": f"Ann has {a} apples and buys {b} more. How many apples does she have? {_words(i, 3)}",
            "answer": f"Ann has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} apples.\n#### {a + b}"}


def _unpaired(i: int) -> dict:  # trl-lib/kto-mix-14k, trl-lib/ultrafeedback-gpt-3.5-turbo-helpfulness
    return {"prompt": [{"role": "user", "content": _words(i, 8) + "?"}],
            "completion": [{"role": "assistant", "content": _words(i + 1, 6)}], "label": i % 3 != 0}


def _prompt_completion(i: int) -> dict:
    """trl-lib/chatbot_arena_completions, which TRL's gkd.py and gold.py train on: a conversation in `messages`, as
    GKD's collator (DataCollatorForChatML) reads it, and no `prompt` column. That is the hub's dataset as TRL's own
    history shows it: gkd.py up to v0.17 mapped `x["prompt"]` and stopped with KeyError 'prompt' until "[GKD] fix the
    gkd script" (trl#3497, 2025-05-26) removed the map, and f2cd577 still guards its callback on "prompt" being absent
    "from conversational datasets" (trl#6251)."""
    return {"messages": [{"role": "user", "content": _words(i, 8) + "?"},
                         {"role": "assistant", "content": _words(i + 1, 6)}]}


def _prompt_only(i: int) -> dict:  # trl-lib/ultrafeedback-prompt
    return {"prompt": [{"role": "user", "content": _words(i, 8) + "?"}]}


def _stepwise(i: int) -> dict:  # trl-lib/prm800k: a problem, its solution's steps and a label per step
    return {"prompt": f"What is {i % 9} plus {i % 7}? {_words(i, 4)}",
            "completions": [_words(i + 1, 5), _words(i + 2, 5), f"The answer is {i % 9 + i % 7}."],
            "labels": [True, i % 2 == 0, i % 2 == 0]}


def _triple(i: int) -> dict:  # tpo-alignment/triple-preference-ultrafeedback-40K: plain strings (tpo.py wraps them)
    return {"prompt": _words(i, 8) + "?", "reference": _words(i + 3, 6), "chosen": _words(i + 1, 6),
            "rejected": _words(i + 2, 6)}


def _coding_seed(i: int) -> dict:  # microsoft/rStar-Coder, config seed_sft: a problem in `question`
    return {"question": f"Write a function that returns {i % 9} plus its argument. {_words(i, 6)}",
            "response": f"def f(x):\n    return x + {i % 9}", "code": f"def f(x):\n    return x + {i % 9}"}


def _imdb(i: int) -> dict:
    return {"text": f"This movie was {_words(i, 48)}.", "label": i % 2}  # > 200 characters: the notebooks filter
def _multimodal_r1(i: int) -> dict:
    """A row of lmms-lab/multimodal-open-r1-8k-verified as its scripts read it: `image` (an Image feature: a PIL image
    of its own size and mode), `problem` (text) and `solution` (the answer, which accuracy_reward parses). Sizes vary
    around the scripts' 512-pixel filter (1 row in 16 is wider: filtered out) and 1 in 4 is grayscale (their
    convert_to_rgb turns it to RGB), as the hub's images do."""
    from PIL import Image

    a, b = 2 + i % 9, 3 + i % 5
    size = (600, 40) if i % 16 == 15 else (56 + 8 * (i % 5), 56 + 4 * (i % 7))
    image = Image.new("L" if i % 4 == 3 else "RGB", size, color=(i * 37) % 256 if i % 4 == 3 else
                      ((i * 37) % 256, (i * 91) % 256, (i * 53) % 256))
    return {"image": image, "problem": f"The figure shows {a} rows of {b} squares. How many squares? {_words(i, 3)}",
            "solution": f"${a * b}$"}


def _rlaif_v(i: int) -> dict:
    """A row of HuggingFaceH4/rlaif-v_formatted as dpo_vlm.py reads it: `images` (a list of one image), `prompt` (a
    user turn whose content is an image part and a text part), `chosen` and `rejected` (an assistant turn each)."""
    from PIL import Image

    image = Image.new("RGB", (56 + 8 * (i % 5), 56 + 4 * (i % 7)), color=((i * 37) % 256, (i * 91) % 256, 128))
    return {"images": [image],
            "prompt": [{"role": "user", "content": [{"type": "image", "text": None},
                                                     {"type": "text", "text": _words(i, 8) + "?"}]}],
            "chosen": [{"role": "assistant", "content": [{"type": "text", "text": _words(i + 1, 6)}]}],
            "rejected": [{"role": "assistant", "content": [{"type": "text", "text": _words(i + 2, 6)}]}]}


_GENES = ("JNKK", "MAPKK4", "TP53", "MDM2", "BRCA1", "BARD1", "EGFR", "GRB2", "AKT1", "PDPK1")


def _biogrid(i: int) -> dict:
    """qgallouedec/biogrid: one interaction per row in BioGRID's PSI-MITAB 2.5 export (header names with spaces, which
    grpo_agent.py turns into underscores before it writes them to SQLite; its prompt names Alt_IDs_Interactor_A/B,
    Aliases_Interactor_A/B and taxid:9606). The hub's file is not readable here: these are MITAB's columns."""
    a, b = _GENES[i % len(_GENES)], _GENES[(i * 3 + 1) % len(_GENES)]
    return {"ID Interactor A": f"entrez gene/locuslink:{1000 + i}", "ID Interactor B": f"entrez gene/locuslink:{2000 + i}",
            "Alt IDs Interactor A": f"biogrid:{i}|entrez gene/locuslink:{a}",
            "Alt IDs Interactor B": f"biogrid:{i + 500}|entrez gene/locuslink:{b}",
            "Aliases Interactor A": f"entrez gene/locuslink:{a}(gene name synonym)",
            "Aliases Interactor B": f"entrez gene/locuslink:{b}(gene name synonym)",
            "Interaction Detection Method": 'psi-mi:"MI:0018"(two hybrid)', "Publication 1st Author": "Author (2001)",
            "Publication Identifiers": f"pubmed:{10000 + i}", "Taxid Interactor A": "taxid:9606",
            "Taxid Interactor B": "taxid:9606", "Interaction Types": 'psi-mi:"MI:0407"(direct interaction)',
            "Source Database": 'psi-mi:"MI:0463"(biogrid)', "Interaction Identifiers": f"biogrid:{300000 + i}",
            "Confidence Values": "-"}


def _biogrid_qa(i: int) -> dict:
    """qgallouedec/biogrid_qa: a question and its Yes/No answer (grpo_agent.py keeps the questions that start with
    "Does the gene " and passes `answer` to its rewards)."""
    a, b = _GENES[i % len(_GENES)], _GENES[(i + 3) % len(_GENES)]
    if i % 4 == 3:
        return {"question": f"Which genes interact with {a} in humans?", "answer": "No"}
    return {"question": f"Does the gene {a} interact with {b} in humans?", "answer": "Yes" if i % 2 else "No"}


# hub id -> {config: {split: (row maker, rows)}}: the columns and splits of the hub's dataset
DATASETS = {
    "trl-lib/tldr": {"default": {"train": (_tldr, 64), "validation": (_tldr, 16), "test": (_tldr, 16)}},
    "trl-internal-testing/tldr-preference-sft-trl-style": {
        "default": {"train": (_tldr_sft, 64), "validation": (_tldr_sft, 16), "test": (_tldr_sft, 16)}},
    # ppo.py keeps the last 100 rows for eval and trains on the rest in batches of 64 (drop_last)
    "trl-internal-testing/descriptiveness-sentiment-trl-style": {
        "default": {"descriptiveness": (_sentiment, 400), "sentiment": (_sentiment, 400)}},
    "trl-lib/ultrafeedback_binarized": {"default": {"train": (_conversation_pair, 64), "test": (_conversation_pair, 16)}},
    "trl-internal-testing/hh-rlhf-helpful-base-trl-style": {
        "default": {"train": (_hh_trl_style, 64), "test": (_hh_trl_style, 16)}},
    # problem / solution / messages, as AI-MO/NuminaMath-TIR (72,441 and 99 rows): its scripts take `train[:5%]`,
    # so enough rows that 5% fills a generation batch on the 8 processes their launches start (rloo.py: 256 prompts)
    "AI-MO/NuminaMath-TIR": {"default": {"train": (_numina, 10000), "test": (_numina, 100)}},
    "openai/gsm8k": {"main": {"train": (_gsm8k, 128), "test": (_gsm8k, 32)}},
    "stanfordnlp/imdb": {"plain_text": {"train": (_imdb, 64), "test": (_imdb, 16)}},
    "trl-lib/kto-mix-14k": {"default": {"train": (_unpaired, 64), "test": (_unpaired, 16)}},
    "trl-lib/chatbot_arena_completions": {"default": {"train": (_prompt_completion, 64),
                                                      "test": (_prompt_completion, 16)}},
    "trl-lib/ultrafeedback-prompt": {"default": {"train": (_prompt_only, 64), "test": (_prompt_only, 16)}},
    "trl-lib/prm800k": {"default": {"train": (_stepwise, 64), "test": (_stepwise, 16)}},
    "tpo-alignment/triple-preference-ultrafeedback-40K": {"default": {"train": (_triple, 64), "test": (_triple, 16)}},
    "microsoft/rStar-Coder": {"seed_sft": {"train": (_coding_seed, 64)}},
    # image / problem / solution (7.69k rows, one train split): the VLM scripts hold 100 rows out for their test split
    # and train on the rest, up to 64 prompts a generation (gspo_vlm.py) on each of the launch's 8 processes
    "lmms-lab/multimodal-open-r1-8k-verified": {"default": {"train": (_multimodal_r1, 640)}},
    # images / prompt / chosen / rejected, conversational with image parts: dpo_vlm.py's one optimizer step takes 32
    # micro-batches of 2 rows
    "HuggingFaceH4/rlaif-v_formatted": {"default": {"train": (_rlaif_v, 96), "test": (_rlaif_v, 16)}},
    # grpo_agent.py (trl@f2cd577): the interactions table it writes to SQLite for its tool, and its questions
    "qgallouedec/biogrid": {"default": {"train": (_biogrid, 200)}},
    "qgallouedec/biogrid_qa": {"default": {"train": (_biogrid_qa, 64)}},
}


def _snapshot(home: Path, repo: str, kind: str = "models") -> Path:
    folder = home / "hub" / f"{kind}--{repo.replace('/', '--')}"
    sha = hashlib.sha1(repo.encode()).hexdigest()
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / "main").write_text(sha)
    snap = folder / "snapshots" / sha
    snap.mkdir(parents=True, exist_ok=True)
    return snap


def _pythia(dest: Path, head: str) -> None:
    from transformers import AutoTokenizer, GPTNeoXConfig, GPTNeoXForCausalLM, GPTNeoXForSequenceClassification

    tok = AutoTokenizer.from_pretrained(FIXTURES / "gpt2-nopad")
    eos = tok.convert_tokens_to_ids("<|endoftext|>")
    vocab = -(-len(tok) // 128) * 128  # Pythia's embedding matrix is rounded up (50304 rows for 50277 tokens)
    cfg = GPTNeoXConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512, bos_token_id=eos, eos_token_id=eos,
                        num_labels=1)
    import torch

    torch.manual_seed(0)
    model = (GPTNeoXForSequenceClassification if head == "rm" else GPTNeoXForCausalLM)(cfg)
    model.save_pretrained(dest, safe_serialization=True)
    tok.save_pretrained(dest)


def _qwen3(dest: Path, template: str, positions: int) -> None:
    """Qwen3's architecture over the qwen2-chat fixture's ChatML tokenizer and generation config, with the hub
    repository's context (max_position_embeddings: 40960 for Qwen3-0.6B and 1.7B, 262144 for Qwen3-4B-Instruct-2507;
    rotary positions, so a number, not a table) and its own chat template: TRL 1.x keeps an exact copy of each (trl/chat_templates/<template>.jinja, which its
    tool calling recognizes by identity: "Original Qwen3 chat template"). An older TRL ships none: the fixture's
    ChatML template then stays (those releases have no tool calling to tell them apart)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    source = FIXTURES / "qwen2-chat"
    for f in source.iterdir():
        if f.is_file() and f.name not in ("config.json", "model.safetensors"):
            shutil.copy2(f, dest / f.name)
    jinja = _trl_chat_template(template)
    if jinja is not None:
        config_path = dest / "tokenizer_config.json"
        config = json.loads(config_path.read_text())
        config["chat_template"] = jinja
        config_path.write_text(json.dumps(config, indent=2))
        (dest / "chat_template.jinja").write_text(jinja)  # transformers 5 reads this file before the config's key
    old = json.loads((source / "config.json").read_text())
    cfg = Qwen3Config(vocab_size=old["vocab_size"], hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=positions,
                      bos_token_id=old["bos_token_id"], eos_token_id=old["eos_token_id"], tie_word_embeddings=True)
    import torch

    torch.manual_seed(0)
    Qwen3ForCausalLM(cfg).save_pretrained(dest, safe_serialization=True)


def _trl_chat_template(name: str) -> str | None:
    """The installed TRL's copy of a model repository's chat template (trl/chat_templates/NAME.jinja), if it has one."""
    import importlib.util

    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "chat_templates" / f"{name}.jinja"
    return path.read_text() if path.is_file() else None


def _distilbert(dest: Path) -> None:
    """A two-label DistilBERT sentiment classifier (lvwerra/distilbert-imdb's classes and labels), a WordPiece
    vocabulary of lower-case letters and a few words."""
    from transformers import DistilBertConfig, DistilBertForSequenceClassification, DistilBertTokenizerFast

    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *letters, *"0123456789!.,?'", *(f"##{c}" for c in letters),
             *sorted(set(_words(0, 12).split() + _words(1, 12).split() + ["this", "movie", "was"]))]
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "vocab.txt").write_text("\n".join(vocab) + "\n")
        tokenizer = DistilBertTokenizerFast(vocab_file=str(Path(tmp) / "vocab.txt"), do_lower_case=True)
    cfg = DistilBertConfig(vocab_size=len(vocab), dim=32, n_layers=1, n_heads=2, hidden_dim=64,
                           id2label={0: "NEGATIVE", 1: "POSITIVE"}, label2id={"NEGATIVE": 0, "POSITIVE": 1})
    import torch

    torch.manual_seed(0)
    DistilBertForSequenceClassification(cfg).save_pretrained(dest, safe_serialization=True)
    tokenizer.save_pretrained(dest)


QWEN2VL_TEMPLATE = _fixture_builder("_build_vlm").QWEN2VL_TEMPLATE  # Qwen2.5-VL's own, as the fixture has it

# Qwen/Qwen2.5-VL-3B-Instruct's preprocessor_config.json
QWEN2_5_VL_PREPROCESSOR = {
    "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
    "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
    "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5_VLProcessor",
}


def _qwen2_5_vl(dest: Path) -> None:
    """Qwen2.5-VL's architecture (a windowed-attention vision tower, its merger, a Qwen2 language model with multimodal
    rope, tied embeddings as the 3B's) over the qwen2vl-tiny fixture's ChatML tokenizer with Qwen2-VL's vision tokens,
    and the 3B's processor files: preprocessor_config.json (Qwen2_5_VLProcessor) and chat_template.json."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    source = FIXTURES / "qwen2vl-tiny"
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy2(source / name, dest / name)
    tok = json.loads((source / "tokenizer.json").read_text())
    ids = {t["content"]: t["id"] for t in tok["added_tokens"]}
    old = json.loads((source / "config.json").read_text())
    vocab = (old.get("text_config") or old)["vocab_size"]
    # the 3B's context: 128000 positions (its tokenizer's model_max_length 131072), which context-length judges against
    text = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=128000, rope_scaling={"type": "mrope",
                "mrope_section": [2, 3, 3]}, bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
                tie_word_embeddings=True)
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=14,
                  spatial_merge_size=2, temporal_patch_size=2, window_size=112, fullatt_block_indexes=[1],
                  tokens_per_second=2, in_channels=3)
    special = dict(image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                   vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
    try:  # transformers 5 nests the language model's settings in text_config; 4.x reads them at the top level
        cfg = Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True, **special)
        nested = getattr(cfg.get_text_config(), "hidden_size", None) == text["hidden_size"]
    except (TypeError, AttributeError):
        nested = False
    if not nested:
        cfg = Qwen2_5_VLConfig(vision_config=vision, **text, **special)
    import torch

    torch.manual_seed(0)
    Qwen2_5_VLForConditionalGeneration(cfg).save_pretrained(dest, safe_serialization=True)
    (dest / "preprocessor_config.json").write_text(json.dumps(QWEN2_5_VL_PREPROCESSOR, indent=2) + "\n")
    (dest / "chat_template.json").write_text(json.dumps({"chat_template": QWEN2VL_TEMPLATE}, indent=2) + "\n")
    config = json.loads((dest / "tokenizer_config.json").read_text())
    config["chat_template"] = QWEN2VL_TEMPLATE
    config["model_max_length"] = 131072
    (dest / "tokenizer_config.json").write_text(json.dumps(config, indent=2))


def _model(home: Path, repo: str, how: str) -> None:
    snap = _snapshot(home, repo)
    if any(snap.iterdir()):
        return
    if how.startswith("fixture:"):
        for f in (FIXTURES / how.split(":", 1)[1]).iterdir():
            if f.is_file():
                shutil.copy2(f, snap / f.name)
    elif how.startswith("qwen3:"):
        _, template, positions = how.split(":")
        _qwen3(snap, template, int(positions))
    elif how == "distilbert-sentiment":
        _distilbert(snap)
    elif how == "qwen2_5_vl":
        _qwen2_5_vl(snap)
    else:
        _pythia(snap, "rm" if how.endswith("-rm") else "lm")
    _input_names(snap)


def _input_names(snap: Path) -> None:
    """The inputs the hub's tokenizer returns: Qwen's, Pythia's and GPT-2's tokenizer classes return input_ids and
    attention_mask. A generic fast tokenizer (what transformers 4.x loads a trained `tokenizers` file as) also returns
    token_type_ids, which a model's forward refuses: a crash of the stand-in's making, not of the script's."""
    path = snap / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config["model_input_names"] = ["input_ids", "attention_mask"]
    path.write_text(json.dumps(config, indent=2))


def _dataset(home: Path, repo: str, configs: dict) -> None:
    import datasets

    from datasets.naming import camelcase_to_snakecase

    org, name = repo.split("/")
    name = camelcase_to_snakecase(name)  # as the cache names it (AI-MO/NuminaMath-TIR: AI-MO___numina_math-tir)
    for config, splits in configs.items():
        target = home / "datasets" / f"{org}___{name}" / config / "0.0.0"
        if target.exists():
            continue
        with tempfile.TemporaryDirectory() as tmp:
            files = {}
            builder = "json"
            for split, (make, rows) in splits.items():
                records = [make(i) for i in range(rows)]
                if any(_is_image(v) for v in records[0].values()):  # an Image feature: JSON cannot carry it
                    builder = "parquet"
                    files[split] = f"{tmp}/{split}.parquet"
                    datasets.Dataset.from_list(records, features=_features(records[0])).to_parquet(files[split])
                    continue
                files[split] = f"{tmp}/{split}.jsonl"
                with open(files[split], "w") as f:
                    for record in records:
                        f.write(json.dumps(record) + "\n")
            datasets.load_dataset(builder, data_files=files, cache_dir=f"{tmp}/cache")
            (info,) = glob.glob(f"{tmp}/cache/{builder}/*/0.0.0/*/dataset_info.json")
            prepared = Path(info).parent
            dest = target / prepared.name
            shutil.copytree(prepared, dest)
            for arrow in dest.glob(f"{builder}-*.arrow"):  # named after the dataset, as its cache names them
                arrow.rename(dest / arrow.name.replace(f"{builder}-", f"{name}-", 1))
            info = json.loads((dest / "dataset_info.json").read_text())  # a named config (openai/gsm8k's "main") is
            info["config_name"] = config  # found only where its info says so
            (dest / "dataset_info.json").write_text(json.dumps(info))


def _is_image(value) -> bool:
    """A PIL image, or a non-empty list of them (an `images` column)."""
    try:
        from PIL import Image
    except ImportError:
        return False
    if isinstance(value, list):
        return bool(value) and all(isinstance(v, Image.Image) for v in value)
    return isinstance(value, Image.Image)


def _features(record: dict):
    """The row's features: Image where the value is a PIL image, a list of Image for a list of them, the rest as
    datasets infers them."""
    import datasets

    def feature(key, value):
        if _is_image(value):
            return datasets.Sequence(datasets.Image()) if isinstance(value, list) else datasets.Image()
        return datasets.Dataset.from_list([{key: value}]).features[key]

    return datasets.Features({k: feature(k, v) for k, v in record.items()})


def build(home: Path) -> dict[str, str]:
    """Fill HF_HOME=`home` with every stand-in; the environment that points the hub and datasets there, offline."""
    home.mkdir(parents=True, exist_ok=True)
    for repo, (how, _) in MODELS.items():
        try:
            _model(home, repo, how)
        except ImportError:  # an architecture the installed transformers predates (Qwen3 before 4.51): no case there
            shutil.rmtree(_snapshot(home, repo).parent.parent, ignore_errors=True)
    for repo, configs in DATASETS.items():
        try:
            _dataset(home, repo, configs)
        except ImportError:  # an image dataset without Pillow: the VLM cases need torchvision (and Pillow) to run
            continue
    return {"HF_HOME": str(home), "HF_HUB_CACHE": str(home / "hub"), "HF_DATASETS_CACHE": str(home / "datasets"),
            "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


if __name__ == "__main__":
    import sys

    print(json.dumps(build(Path(sys.argv[1] if len(sys.argv) > 1 else os.path.join(tempfile.gettempdir(), "hf"))),
                     indent=1))
