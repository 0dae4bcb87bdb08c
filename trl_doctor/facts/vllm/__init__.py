"""Facts about a job that generates with vLLM: how the installed TRL hands prompts, sampling settings and the
tokenizer over to vLLM, and what vLLM itself would load (`handover`); where the trainer finds its vLLM server and what
that server answers (`server`); what the policy's weights go through on their way to vLLM: quantization, TRL's
weight sync, the architectures the installed vLLM implements (`support`)."""
