"""Facts about the job's GPU memory: the plan read from the check (`plan`: model dimensions, parameter counts,
adapters, reward and reference models, the logits path), the per-component arithmetic over a plan (`estimate`: pure
numbers, no context), and that estimate judged against the launch machine's training GPUs (`fit`)."""
