"""Facts about the launch: the training processes, the GPUs the job sees and the accelerate / DeepSpeed / FSDP
settings it starts with (`launcher`), and the value the trainer will see for each config key and the settings it
resolves (`settings`: `config_value(ctx, key)`, the one way to read a value in every context)."""
