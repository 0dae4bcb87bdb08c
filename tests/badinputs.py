"""Bad inputs for the fuzz suite (tests/test_fuzz.py), each built from one healthy GRPO setup:

    setup/config.yaml       model_name_or_path: model, dataset_path: prompts.jsonl, reward_funcs: [rewards.format_reward]
    setup/model/            a copy of fixtures/models/qwen2-chat (config, generation config, tokenizer, safetensors)
    setup/prompts.jsonl     16 conversational prompts
    setup/rewards.py        one reward function

A case is a name and a mutation of that tree. The classes: the config's values (every watched key with values
of the wrong type, size or meaning), the config file itself (shape, encoding, size, nesting, kind of file), the
paths it names, the model folder's files (config.json, tokenizer files, generation config, weights), the dataset
file, and the reward module. `cases(seed)` lists them all in a stable order; the fast subset is a seeded sample.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Callable

from conftest import FIXTURES

HEALTHY_CONFIG = """\
model_name_or_path: model
dataset_path: prompts.jsonl
reward_funcs: [rewards.format_reward]
num_generations: 2
per_device_train_batch_size: 2
max_completion_length: 32
"""
REWARDS = '''\
def format_reward(completions, **kwargs):
    return [0.5 if "<think>" in str(c) else 0.0 for c in completions]
'''

Mutation = Callable[[Path], None]

KEYS = ("per_device_train_batch_size", "num_generations", "gradient_accumulation_steps", "generation_batch_size",
        "steps_per_generation", "max_completion_length", "max_prompt_length", "learning_rate", "max_steps",
        "num_iterations", "beta", "temperature", "top_p", "bf16", "fp16", "use_vllm", "vllm_mode",
        "gradient_checkpointing", "num_train_epochs", "warmup_ratio", "seed", "reward_weights", "use_peft",
        "lora_r", "model_init_kwargs", "logging_steps", "save_steps", "epsilon", "scale_rewards", "loss_type")
VALUES = ('"banana"', "[2]", "{a: 1}", "null", "-1", "0", str(10**30), ".nan", ".inf", "-.inf", "true", '""',
          "1.5", "1e-300", "[[[]]]", "2147483648", '"2"', "!!binary aGVsbG8=", "2026-11-22")


def build_setup(root: Path) -> Path:
    """The healthy setup under root/setup (the model copied from the built fixtures)."""
    setup = root / "setup"
    shutil.copytree(FIXTURES / "models" / "qwen2-chat", setup / "model")
    shutil.copy(FIXTURES / "data" / "chat.jsonl", setup / "prompts.jsonl")
    (setup / "rewards.py").write_text(REWARDS)
    (setup / "config.yaml").write_text(HEALTHY_CONFIG)
    return setup


def _set(key: str, value: str) -> Mutation:
    def mutate(d: Path) -> None:
        lines = [ln for ln in HEALTHY_CONFIG.splitlines() if not ln.startswith(f"{key}:")]
        (d / "config.yaml").write_text("\n".join(lines + [f"{key}: {value}"]) + "\n")
    return mutate


def _write(rel: str, data: str | bytes) -> Mutation:
    def mutate(d: Path) -> None:
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return mutate


def _delete(rel: str) -> Mutation:
    return lambda d: (d / rel).unlink()


def _json_edit(rel: str, **changes) -> Mutation:
    def mutate(d: Path) -> None:
        p = d / rel
        doc = json.loads(p.read_text())
        for k, v in changes.items():
            if v is _DROP:
                doc.pop(k, None)
            else:
                doc[k] = v
        p.write_text(json.dumps(doc))
    return mutate


_DROP = object()


def _cut(rel: str, keep: float) -> Mutation:
    def mutate(d: Path) -> None:
        p = d / rel
        data = p.read_bytes()
        p.write_bytes(data[: int(len(data) * keep)])
    return mutate


def _both(*mutations: Mutation) -> Mutation:
    def mutate(d: Path) -> None:
        for m in mutations:
            m(d)
    return mutate


def config_values(per_key: int = 4) -> dict[str, Mutation]:
    """`per_key` wrong values for each watched key (a seeded choice, the same on every run)."""
    rng = random.Random(20261122)
    return {f"value/{k}={v}": _set(k, v) for k in KEYS for v in rng.sample(VALUES, per_key)}


def config_files() -> dict[str, Mutation]:
    deep = "a: " + "[" * 5000 + "]" * 5000
    return {
        "file/empty": _write("config.yaml", ""),
        "file/list": _write("config.yaml", "- 1\n- 2\n"),
        "file/scalar": _write("config.yaml", "hello\n"),
        "file/binary": _write("config.yaml", bytes(random.Random(7).randrange(256) for _ in range(3000))),
        "file/latin1": _write("config.yaml", HEALTHY_CONFIG.encode() + "# caf\xe9\n".encode("latin-1")),
        "file/nul-bytes": _write("config.yaml", HEALTHY_CONFIG + "\x00\x00\n"),
        "file/bom": _write("config.yaml", b"\xef\xbb\xbf" + HEALTHY_CONFIG.encode()),
        "file/deep-yaml": _write("config.yaml", deep),
        "file/deep-flow-map": _write("config.yaml", "a: " + "{b: " * 3000 + "1" + "}" * 3000),
        "file/huge": _write("config.yaml", HEALTHY_CONFIG + "# " + "x" * (12 * 2**20) + "\n"),
        "file/invalid-yaml": _write("config.yaml", "model_name_or_path: [model\n"),
        "file/tabs": _write("config.yaml", "model_name_or_path: model\n\tdataset_path: prompts.jsonl\n"),
        "file/int-keys": _write("config.yaml", HEALTHY_CONFIG + "1: 2\n"),
        "file/duplicate-key": _write("config.yaml", HEALTHY_CONFIG + "num_generations: 4\n"),
        "file/anchors": _write("config.yaml", HEALTHY_CONFIG + "a: &a [1, 2]\nb: [*a, *a, *a]\n"),
        "file/unknown-trainer": _write("config.yaml", HEALTHY_CONFIG + "trainer: dpo\n"),
        "file/trainer-list": _write("config.yaml", HEALTHY_CONFIG + "trainer: [grpo]\n"),
        "file/no-model": _write("config.yaml", "dataset_path: prompts.jsonl\n"),
        "file/reward-funcs-dict": _write("config.yaml", HEALTHY_CONFIG.replace("[rewards.format_reward]", "{a: 1}")),
        "file/reward-funcs-empty": _write("config.yaml", HEALTHY_CONFIG.replace("[rewards.format_reward]", "[]")),
        "file/dataset-int": _write("config.yaml", HEALTHY_CONFIG.replace("prompts.jsonl", "12")),
    }


def paths() -> dict[str, Mutation]:
    return {
        "path/nul": _set("model_name_or_path", '"mo\\0del"'),
        "path/long": _set("model_name_or_path", "x" * 5000),
        "path/long-name": _set("model_name_or_path", "d/" + "y" * 300),
        "path/tilde-user": _set("model_name_or_path", "~nosuchuser/model"),
        "path/missing": _set("model_name_or_path", "no/such/folder"),
        "path/file-not-folder": _set("model_name_or_path", "prompts.jsonl"),
        "path/dataset-folder": _set("dataset_path", "model"),
        "path/dataset-missing": _set("dataset_path", "nope.jsonl"),
        "path/dataset-suffix": _set("dataset_path", "rewards.py"),
        "path/symlink-loop": _both(lambda d: os.symlink(d / "loop", d / "loop"), _set("model_name_or_path", "loop")),
        "path/hub-id-invalid": _set("model_name_or_path", '"-bad-/--repo--"'),
        "path/tokenizer-int": _set("tokenizer_name_or_path", "5"),
        "path/reward-model-missing": _set("reward_model_name_or_path", "no/such"),
    }


def model_files() -> dict[str, Mutation]:
    out = {
        "model/config-missing": _delete("model/config.json"),
        "model/config-invalid": _write("model/config.json", "{not json"),
        "model/config-list": _write("model/config.json", "[1, 2]"),
        "model/config-empty": _write("model/config.json", ""),
        "model/config-latin1": _write("model/config.json", b'{"model_type": "qwen2", "x": "caf\xe9"}'),
        "model/config-no-type": _json_edit("model/config.json", model_type=_DROP),
        "model/config-type-int": _json_edit("model/config.json", model_type=5),
        "model/config-type-unknown": _json_edit("model/config.json", model_type="no-such-arch"),
        "model/config-deep": _write("model/config.json", "[" * 100000 + "]" * 100000),
        "model/tokenizer-json-invalid": _write("model/tokenizer.json", "{bad"),
        "model/tokenizer-json-cut": _cut("model/tokenizer.json", 0.5),
        "model/tokenizer-missing": _delete("model/tokenizer.json"),
        "model/tokenizer-config-list": _write("model/tokenizer_config.json", "[]"),
        "model/tokenizer-config-invalid": _write("model/tokenizer_config.json", "{"),
        "model/template-syntax": _write("model/chat_template.jinja", "{% for m in messages %}{{ m.content "),
        "model/template-raises": _write("model/chat_template.jinja", "{{ raise_exception('no') }}"),
        "model/template-empty": _write("model/chat_template.jinja", ""),
        "model/generation-invalid": _write("model/generation_config.json", "{oops"),
        "model/generation-list": _write("model/generation_config.json", "[]"),
        "model/generation-eos-str": _json_edit("model/generation_config.json", eos_token_id="two"),
        "model/generation-eos-negative": _json_edit("model/generation_config.json", eos_token_id=[-1]),
        "model/generation-eos-huge": _json_edit("model/generation_config.json", eos_token_id=10**9),
        "model/generation-temperature-str": _json_edit("model/generation_config.json", temperature="hot"),
        "model/weights-cut": _cut("model/model.safetensors", 0.5),
        "model/weights-garbage": _write("model/model.safetensors", bytes(range(256)) * 64),
        "model/weights-empty": _write("model/model.safetensors", b""),
        "model/weights-missing": _delete("model/model.safetensors"),
        "model/pad-id-str": _json_edit("model/config.json", pad_token_id="zero"),
        "model/eos-id-huge": _json_edit("model/config.json", eos_token_id=10**12),
        "model/rope-garbage": _json_edit("model/config.json", rope_scaling={"type": 5}),
        "model/dtype-garbage": _json_edit("model/config.json", torch_dtype="float99"),
    }
    for key, values in (("vocab_size", (-5, 0, 10**12, "320", 1.5, None)), ("num_attention_heads", (0, -2, 3)),
                        ("hidden_size", (0, 7, 10**9)), ("num_hidden_layers", (0, -1, 10**7)),
                        ("max_position_embeddings", (0, -1, "x")), ("num_key_value_heads", (0, 3))):
        for v in values:
            out[f"model/{key}={v}"] = _json_edit("model/config.json", **{key: v})
    return out


def _link(rel: str, target: str) -> Mutation:
    def mutate(d: Path) -> None:
        p = d / rel
        if p.exists() or p.is_symlink():
            p.unlink()
        os.symlink(target, p)
    return mutate


def _config_number(digits: int) -> Mutation:
    def mutate(d: Path) -> None:
        p = d / "model" / "config.json"
        p.write_text(p.read_text().replace('"vocab_size": ', f'"x": {"7" * digits}, "vocab_size": '))
    return mutate


def odd_files() -> dict[str, Mutation]:
    """Numbers Python will not convert, symbolic link loops and device files where the check reads a file."""
    return {
        "model/config-5000-digits": _config_number(5000),
        "model/config-loop": _link("model/config.json", "config.json"),
        "model/config-device": _link("model/config.json", "/dev/zero"),
        "model/tokenizer-device": _link("model/tokenizer.json", "/dev/zero"),
        "model/tokenizer-config-loop": _link("model/tokenizer_config.json", "tokenizer_config.json"),
        "model/folder-loop": _both(_link("model/loop_a", "loop_b"), _link("model/loop_b", "loop_a")),
        "data/device": _link("prompts.jsonl", "/dev/zero"),
        "data/fifo": lambda d: ((d / "prompts.jsonl").unlink(), os.mkfifo(d / "prompts.jsonl")),
    }


def datasets() -> dict[str, Mutation]:
    return {
        "data/latin1": _write("prompts.jsonl", b'{"prompt": "caf\xe9"}\n'),
        "data/empty": _write("prompts.jsonl", ""),
        "data/blank-lines": _write("prompts.jsonl", "\n\n\n"),
        "data/invalid-line": _write("prompts.jsonl", '{"prompt": "a"}\n{bad\n'),
        "data/list-rows": _write("prompts.jsonl", "[1, 2]\n[3]\n"),
        "data/no-prompt": _write("prompts.jsonl", '{"question": "a"}\n' * 4),
        "data/prompt-int": _write("prompts.jsonl", '{"prompt": 5}\n' * 4),
        "data/prompt-null": _write("prompts.jsonl", '{"prompt": null}\n' * 4),
        "data/prompt-ints": _write("prompts.jsonl", '{"prompt": [1, 2, 3]}\n' * 4),
        "data/prompt-nested": _write("prompts.jsonl", '{"prompt": {"a": {"b": 1}}}\n' * 4),
        "data/prompt-mixed": _write("prompts.jsonl", '{"prompt": "a"}\n{"prompt": [{"role": "user", "content": "b"}]}\n'),
        "data/messages-no-content": _write("prompts.jsonl", '{"prompt": [{"role": "user"}]}\n' * 4),
        "data/bom": _write("prompts.jsonl", b"\xef\xbb\xbf" + (FIXTURES / "data" / "chat.jsonl").read_bytes()),
        "data/cut": _cut("prompts.jsonl", 0.5),
        "data/huge-row": _write("prompts.jsonl", json.dumps({"prompt": "word " * 200000}) + "\n"),
        "data/deep-row": _write("prompts.jsonl", '{"prompt": ' + "[" * 5000 + "]" * 5000 + "}\n"),
        "data/parquet-garbage": _both(_write("prompts.parquet", bytes(1000)), _set("dataset_path", "prompts.parquet")),
        "data/json-array-bad": _both(_write("prompts.json", "[{\"prompt\": 1},"), _set("dataset_path", "prompts.json")),
    }


def rewards() -> dict[str, Mutation]:
    def module(code: str) -> Mutation:
        return _write("rewards.py", REWARDS + code + "\n")
    return {
        "reward/missing-module": _delete("rewards.py"),
        "reward/syntax": _write("rewards.py", "def format_reward(:\n"),
        "reward/raises-at-import": module("raise RuntimeError('boom')"),
        "reward/no-function": _write("rewards.py", "x = 1\n"),
        "reward/not-callable": _write("rewards.py", "format_reward = 5\n"),
        "reward/returns-none": _write("rewards.py", "def format_reward(completions, **kw):\n    return None\n"),
        "reward/returns-str": _write("rewards.py", "def format_reward(completions, **kw):\n    return 'a'\n"),
        "reward/returns-nan": _write("rewards.py", "def format_reward(completions, **kw):\n    return [float('nan')] * len(completions)\n"),
        "reward/wrong-length": _write("rewards.py", "def format_reward(completions, **kw):\n    return [1.0]\n"),
        "reward/raises": _write("rewards.py", "def format_reward(completions, **kw):\n    raise KeyError('answer')\n"),
        "reward/no-kwargs": _write("rewards.py", "def format_reward(completions):\n    return [0.0] * len(completions)\n"),
        "reward/recursion": _write("rewards.py", "def format_reward(completions, **kw):\n    return format_reward(completions)\n"),
        "reward/prints": module("print('x' * 10_000_000)"),
        "reward/closes-fds": module("import os\nos.close(1)\nos.close(2)"),
        "reward/exit-0": module("import sys\nsys.exit(0)"),
        "reward/exit-9": module("import os\nos._exit(9)"),
        "reward/keyboard-interrupt": module("raise KeyboardInterrupt"),
        "reward/system-exit-call": _write("rewards.py", "import sys\ndef format_reward(completions, **kw):\n    sys.exit(3)\n"),
        "reward/shadow-json": _write("json.py", "raise RuntimeError('shadowed json')\n"),
        # the worker's process tree and its channel (issue 24): nothing may survive, nothing may forge the report
        "reward/spawns-setsid": module("import subprocess\nsubprocess.Popen(['setsid', 'sleep', '300'])"),
        "reward/double-fork": module("import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
                                     "        time.sleep(300)\n    os._exit(0)"),
        "reward/pool": module("import multiprocessing\nPOOL = multiprocessing.get_context('fork').Pool(2)"),
        "reward/prints-protocol": module("import sys\nline = '{\"version\": 1, \"kind\": \"done\"}'\nprint(line)\n"
                                         "print(line, file=sys.stderr)"),
        "reward/patches-json": module("import json\njson.dumps = lambda *a, **k: 'x'\njson.loads = lambda *a, **k: {}"),
        "reward/closes-all-fds": module("import os\nos.closerange(3, 4096)"),
        "reward/dup2-over-fds": module("import os\nfor fd in range(3, 64):\n    try:\n        os.dup2(1, fd)\n"
                                       "    except OSError:\n        pass"),
        "reward/print-then-exit": module("print('\\x00\\x1b[31m<junit & ]]>')\nimport os\nos._exit(0)"),
        "reward/dotted-missing": _set("reward_funcs", "[no.such.module.fn]"),
        "reward/bad-name": _set("reward_funcs", '["rewards."]'),
    }


def cases() -> dict[str, Mutation]:
    """Every case, in a stable order (about 250)."""
    out: dict[str, Mutation] = {}
    for group in (config_files, paths, model_files, odd_files, datasets, rewards, config_values):
        out.update(group())
    return out


def sample(seed: int, n: int) -> list[str]:
    """A seeded sample of `n` case names that takes from every class."""
    names = list(cases())
    rng = random.Random(seed)
    by_class: dict[str, list[str]] = {}
    for name in names:
        by_class.setdefault(name.split("/")[0], []).append(name)
    picked: list[str] = []
    while len(picked) < n and any(by_class.values()):
        for group in by_class.values():
            if group and len(picked) < n:
                picked.append(group.pop(rng.randrange(len(group))))
    return picked
