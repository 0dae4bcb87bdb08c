"""The trainer run: the installed TRL's real trainer built on the miniature twin (or the real model on a GPU
when it fits), the probes other rules read (the logits contract, termination), then one optimizer step.

- `protocol`: the typed, versioned messages (the spec, the stages, the result);
- `parent`: builds the spec from the check context and turns the outcome into facts for the rules;
- `worker`: builds the trainer and runs the probes and the step, then the real-model sample (--sample N).
"""
