"""`push_to_hub` rehearsed up to the network (issue 60): `trainer.push_to_hub()`, as a job that pushes calls it at its
end (TRL's scripts: `if training_args.push_to_hub: trainer.push_to_hub(...)`; transformers' own at `save_model`), runs
with the Hub offline. What it does before it sends runs as in the job: the final save into the folder it uploads, the
model card the trainer writes (TRL's `create_model_card`: the base model, the datasets, the trackers' run links), the
files it would upload. Its first request to the Hub stops it, and is the phase's end: nothing is sent. Any other
error is the job's, at its very end, after every step.

The Hub is put offline for the phase in the Hub library itself (`huggingface_hub.constants.HF_HUB_OFFLINE`: every
request raises OfflineModeIsEnabled); on a release that reads it only when a session starts, the worker's own network
namespace and guard stop the request instead. Either way the request names where it was going.
"""

from __future__ import annotations

import os
from typing import Any

# the Hub's words for a request that was not let out: offline, or no route from the check's own network
_NETWORK_STOPS = ("OfflineModeIsEnabled", "RefusedConnection", "RefusedLookup", "ConnectError", "ConnectionError",
                  "ConnectTimeout", "gaierror", "NewConnectionError", "MaxRetryError")


def push_up_to_network(trainer: Any, job: dict) -> dict:
    """Run the job's push with the Hub offline; the files it would upload (a record for the phase) where it stopped at
    the network. Raises the job's own error where it stopped before."""
    name = os.path.basename(os.path.normpath(str(job.get("output_dir") or "model")))
    repo = str(job.get("hub_model_id") or f"your-name/{name}")
    before_id, before_args = getattr(trainer, "hub_model_id", None), trainer.args.hub_model_id
    trainer.hub_model_id = repo  # the repository init_hf_repo would have made at construction (the step made none)
    trainer.args.hub_model_id = repo
    offline = _hub_offline(True)
    try:
        trainer.push_to_hub(commit_message="End of training", blocking=True)
    except Exception as exc:
        if not _network(exc):
            raise
        files = sorted(n for n in os.listdir(trainer.args.output_dir)
                       if not n.startswith(("_", "checkpoint-")) and os.path.isfile(
                           os.path.join(trainer.args.output_dir, n)))
        return {"repo": repo, "stopped at": f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}",
                "files": files[:20]}
    finally:
        _hub_offline(offline)
        trainer.hub_model_id, trainer.args.hub_model_id = before_id, before_args
    return {"repo": repo, "stopped at": "nothing reached the network (the push made no request)"}


def _hub_offline(on: bool) -> bool:
    """Set the Hub library's offline switch; what it was."""
    try:
        from huggingface_hub import constants
    except Exception:
        return False
    was = bool(getattr(constants, "HF_HUB_OFFLINE", False))
    constants.HF_HUB_OFFLINE = on
    return was


def _network(exc: BaseException) -> bool:
    """Whether the exception, or one in its chain, is the request stopped on its way out."""
    from trl_doctor.errors import exception_chain

    return any(k.__name__ in _NETWORK_STOPS for at in exception_chain(exc) for k in type(at).__mro__)
