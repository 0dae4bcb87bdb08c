"""policy-react's src/model.py, reproduced: a causal LM in bf16, FlashAttention 2 asked for and dropped when
from_pretrained raises ImportError, device "auto" meaning no device_map, pad = eos when the tokenizer has none."""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def load_model_and_tokenizer(model_name="Qwen/Qwen3-0.6B", device="auto", torch_dtype=torch.bfloat16,
                             attn_implementation="flash_attention_2"):
    model_kwargs = {"torch_dtype": torch_dtype}
    if attn_implementation:
        model_kwargs["attn_implementation"] = attn_implementation
    device_map = device if device != "auto" else None
    try:
        model = AutoModelForCausalLM.from_pretrained(model_name, device_map=device_map, **model_kwargs)
    except ImportError:
        if attn_implementation != "flash_attention_2":
            raise
        print(f"Warning: {attn_implementation} requested but flash-attn not installed. Loading without it.")
        model_kwargs.pop("attn_implementation")
        model = AutoModelForCausalLM.from_pretrained(model_name, device_map=device_map, **model_kwargs)
    except Exception as e:
        raise ValueError(f"Failed to load model {model_name}: {e}") from e

    tokenizer = AutoTokenizer.from_pretrained(model_name)
    if tokenizer.pad_token is None:
        if tokenizer.eos_token:
            tokenizer.pad_token = tokenizer.eos_token
        elif tokenizer.add_special_tokens({"pad_token": "[PAD]"}) == 1:
            model.resize_token_embeddings(len(tokenizer))
    return model, tokenizer
