"""Facts about the launch: the training processes, the GPUs the job sees and the accelerate / DeepSpeed / FSDP
settings it starts with (`launcher`), the value the trainer will see for each config key and the settings it resolves
(`settings`: `config_value(ctx, key)`, the one way to read a value in every context), and what the installed torch,
transformers and accelerate do on that machine (`bf16_support`: bf16 below Ampere; `dataloaders`: an empty
dataloader)."""
