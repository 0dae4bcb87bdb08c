"""The shared context on real configs: the meta-device model gives exact parameter counts of real-sized
models without memory, the miniature twin keeps what the probes depend on, and each artifact loads once."""

from __future__ import annotations

import json

import pytest

from trl_doctor import Context, Options
from trl_doctor.context.config import load_config

pytestmark = pytest.mark.release_free  # the doctor's own code: no release changes the outcome

LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "max_position_embeddings": 8192, "rope_theta": 500000.0, "tie_word_embeddings": False, "rms_norm_eps": 1e-5,
    "bos_token_id": 128000, "eos_token_id": 128009, "torch_dtype": "bfloat16",
}
QWEN25_05B = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896,
    "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
    "max_position_embeddings": 32768, "rope_theta": 1000000.0, "tie_word_embeddings": True, "rms_norm_eps": 1e-6,
    "bos_token_id": 151643, "eos_token_id": 151643, "torch_dtype": "bfloat16",
}


def _ctx(tmp_path, model_config: dict, tokenizer_from) -> Context:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(model_config))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"model_name_or_path: model\ntokenizer_name_or_path: {tokenizer_from}\n")
    return Context(load_config(cfg), Options(device="cpu"))


@pytest.mark.parametrize("config, expected", [(LLAMA3_8B, 8_030_261_248), (QWEN25_05B, 494_032_768)])
def test_meta_model_counts_real_sizes_without_memory(tmp_path, built_fixtures, config, expected):
    with _ctx(tmp_path, config, built_fixtures / "models" / "qwen2-chat") as ctx:
        meta = ctx.meta_model
        assert sum(p.numel() for p in meta.parameters()) == expected
        assert all(p.device.type == "meta" for p in meta.parameters())


@pytest.mark.parametrize("name", ["gpt2-nopad", "qwen2-chat", "llama3-nopad"])
def test_twin_keeps_architecture_vocab_and_special_ids(built_fixtures, tmp_path, name):
    # a config of the test's own (not in the shared fixture tree, which other workers copy while this one runs)
    cfg = tmp_path / "_twin.yaml"
    cfg.write_text(f"model_name_or_path: {built_fixtures / 'models' / name}\n")
    try:
        with Context(load_config(cfg), Options(device="cpu")) as ctx:
            real, twin = ctx.model_config, ctx.twin
            assert type(twin).__name__ == real.architectures[0]
            t = twin.config
            assert t.num_hidden_layers == 2 and t.hidden_size <= 64
            for key in ("vocab_size", "bos_token_id", "eos_token_id", "pad_token_id", "tie_word_embeddings", "model_type"):
                assert getattr(t, key) == getattr(real, key), key
            assert twin.get_input_embeddings().weight.shape[0] == real.vocab_size
            assert twin.get_output_embeddings().weight.shape[0] == real.vocab_size
            # the same seed gives the same weights: probes on the twin are repeatable
            from trl_doctor.context.twin import build_twin

            again = build_twin(real)
            import torch

            assert all(torch.equal(a, b) for a, b in zip(twin.state_dict().values(), again.state_dict().values()))
            assert ctx.twin is twin  # loaded once
    finally:
        cfg.unlink()


def test_twin_of_a_real_sized_config_is_tiny(tmp_path, built_fixtures):
    with _ctx(tmp_path, LLAMA3_8B, built_fixtures / "models" / "llama3-nopad") as ctx:
        twin = ctx.twin
        t = twin.config
        assert (t.num_hidden_layers, t.hidden_size, t.num_attention_heads, t.num_key_value_heads) == (2, 64, 4, 2)  # grouped-query attention stays grouped
        for key in ("rope_parameters", "rope_scaling", "rope_theta", "max_position_embeddings"):
            assert getattr(t, key, None) == getattr(ctx.model_config, key, None), key
        assert sum(p.numel() for p in twin.parameters()) < 20_000_000  # the vocabulary dominates: 2 x 128256 x 64


def test_added_tokens_are_added_as_special(tmp_path, built_fixtures):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"model_name_or_path: {built_fixtures / 'models' / 'qwen2-chat'}\nadded_tokens: ['<search>', '</search>']\n")
    with Context(load_config(cfg)) as ctx:
        tok = ctx.tokenizer
        ids = tok.convert_tokens_to_ids(["<search>", "</search>"])
        assert ids[0] >= 320 and ids[1] == ids[0] + 1
        assert tok("a <search> b")["input_ids"].count(ids[0]) == 1  # never split: it is special
        assert ctx.tokenizer is tok


def test_failed_loads_are_remembered(tmp_path, built_fixtures):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"model_name_or_path: {built_fixtures / 'models' / 'qwen2-chat'}\n")
    with Context(load_config(cfg)) as ctx:
        from trl_doctor import Unavailable

        with pytest.raises(Unavailable) as first:
            ctx.dataset
        with pytest.raises(Unavailable) as second:
            ctx.dataset
        assert second.value is first.value  # the failure is cached, not retried by each rule


@pytest.mark.parametrize("enabled", [True, False], ids=["collector on", "collector off before"])
def test_the_tokenizer_loads_without_garbage_collections(tmp_path, built_fixtures, enabled):
    """Qwen's real 151k-token tokenizer (the benchmark's figure (g)): transformers 5 parses its tokenizer.json into
    hundreds of thousands of Python objects, whose allocation triggered collections of the whole heap. The load
    runs with the collector paused, and leaves it as it found it."""
    import gc

    collections = []

    def seen(phase, info):
        if phase == "start":
            collections.append(info["generation"])

    warm = tmp_path / "c.yaml"  # the same tokenizer class on a tiny vocabulary: the imports are done before
    warm.write_text(f"model_name_or_path: {built_fixtures / 'models' / 'qwen2-chat'}\n")
    with Context(load_config(warm), Options(device="cpu")) as ctx:
        ctx.tokenizer
    cfg = built_fixtures / "models" / "bench-qwen25-realvocab" / "grpo.yaml"
    with Context(load_config(cfg), Options(device="cpu")) as ctx:
        gc.callbacks.append(seen)
        if not enabled:
            gc.disable()
        try:
            tok = ctx.tokenizer
            assert gc.isenabled() is enabled
        finally:
            gc.callbacks.remove(seen)
            gc.enable()
    assert len(tok) > 150_000
    # at most the one the first allocation after the load triggers; without the pause over a thousand, some of
    # them of the whole heap
    assert len(collections) <= 1, collections
