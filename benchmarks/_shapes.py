"""Qwen2.5 model shapes the GPU benchmarks build with random weights (`from_config`): the real configs' hidden size,
layers, heads, key-value heads, MLP width, vocabulary and embedding tying. `tiny` is a small model of the same
family for a CPU run. Imported by the benchmark scripts (run as `python benchmarks/<name>.py`)."""

QWEN25 = {
    "tiny": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=1024, vocab_size=32000, tie_word_embeddings=True),
    "0.5b": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                 intermediate_size=4864, vocab_size=151936, tie_word_embeddings=True),
    "1.5b": dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                 intermediate_size=8960, vocab_size=151936, tie_word_embeddings=True),
    "7b": dict(hidden_size=3584, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
               intermediate_size=18944, vocab_size=152064, tie_word_embeddings=False),
}
