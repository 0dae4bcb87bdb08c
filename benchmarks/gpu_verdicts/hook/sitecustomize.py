"""What a real launch did, recorded from inside it (benchmarks/gpu_verdicts.py puts this folder first on the PYTHONPATH
of the launch only, never of the doctor's check). In every Python process of the launch, when GPU_VERDICTS_RECORD
names a folder:
- the trainer stops after GPU_VERDICTS_STEPS optimizer steps (default 2): the launch's first steps are the ground
  truth, not its whole job; nothing else of the job is changed;
- each log the trainer writes (its metrics), the steps done, the uncaught exception (type, message, the last frame),
  torch.cuda's peak allocated and reserved bytes, and, for each forward that was asked for `logits_to_keep`
  (or `num_logits_to_keep`) positions, the forwards that returned more (or fewer) positions of logits;
- written at exit to GPU_VERDICTS_RECORD/<pid>.json. Then the next sitecustomize on the path runs, as it would have."""

import atexit
import json
import os
import sys
import traceback

_FOLDER = os.environ.get("GPU_VERDICTS_RECORD")
_STEPS = int(os.environ.get("GPU_VERDICTS_STEPS", "2"))
_record = {"pid": os.getpid(), "argv": sys.argv[:6], "steps": 0, "logs": [], "exception": None, "logits": []}


def _patch_callbacks(module) -> None:
    handler = module.CallbackHandler
    begin, step_end, on_log = handler.on_train_begin, handler.on_step_end, handler.on_log

    def on_train_begin(self, args, state, control, **kw):
        model = kw.get("model", getattr(self, "model", None))  # transformers 4.48 passes none: the handler holds it
        if model is not None and hasattr(model, "register_forward_hook"):
            model.register_forward_hook(_logits_hook, with_kwargs=True)
        return begin(self, args, state, control, **kw)

    def on_step_end(self, args, state, control, **kw):
        control = step_end(self, args, state, control, **kw)
        _record["steps"] = state.global_step
        if state.global_step >= _STEPS:
            control.should_training_stop = True
            control.should_save = False
        return control

    def log(self, args, state, control, logs=None, **kw):
        if logs:
            _record["logs"].append({k: v for k, v in logs.items() if isinstance(v, (int, float, str))})
        return on_log(self, args, state, control, logs=logs, **kw)

    handler.on_train_begin, handler.on_step_end, handler.on_log = on_train_begin, on_step_end, log


def _logits_hook(module, args, kwargs, output):
    asked = kwargs.get("logits_to_keep", kwargs.get("num_logits_to_keep"))
    logits = getattr(output, "logits", None)
    ids = kwargs.get("input_ids", args[0] if args else None)
    if not (isinstance(asked, int) and asked > 0 and logits is not None and ids is not None):
        return
    seen = {"input": int(ids.shape[1]), "asked": asked, "returned": int(logits.shape[1])}
    _record["forwards_asked"] = _record.get("forwards_asked", 0) + 1
    if seen["returned"] != asked and len(_record["logits"]) < 4:  # what the model returned beyond what was asked
        _record["logits"].append(seen)


class _After:
    """A meta-path finder that patches transformers' CallbackHandler once its module has run."""

    def find_spec(self, name, path=None, target=None):
        if name != "transformers.trainer_callback":
            return None

        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = getattr(finder, "find_spec", lambda *a: None)(name, path, target)
            if spec is not None and spec.loader is not None:
                run = spec.loader.exec_module

                def exec_module(module, run=run):
                    run(module)
                    _patch_callbacks(module)

                spec.loader.exec_module = exec_module
                return spec
        return None


def _excepthook(kind, value, tb, previous=sys.excepthook):
    last = traceback.extract_tb(tb)[-1] if tb else None
    _record["exception"] = {"type": kind.__name__, "message": str(value)[:600],
                            "at": f"{last.filename}:{last.lineno}" if last else None}
    previous(kind, value, tb)


def _write() -> None:
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            _record["peak_allocated"] = torch.cuda.max_memory_allocated()
            _record["peak_reserved"] = torch.cuda.max_memory_reserved()
    except Exception:
        pass
    if _record["steps"] or _record["logs"] or _record["exception"] or "peak_allocated" in _record:
        with open(os.path.join(_FOLDER, f"{os.getpid()}.json"), "w") as f:
            json.dump(_record, f)


if _FOLDER:
    sys.meta_path.insert(0, _After())
    sys.excepthook = _excepthook
    atexit.register(_write)

# the next sitecustomize on the path, as Python would have run it without this one
_here = os.path.dirname(os.path.abspath(__file__))
for _p in sys.path:
    _f = os.path.join(_p or ".", "sitecustomize.py")
    if os.path.abspath(_p or ".") != _here and os.path.isfile(_f):
        with open(_f) as _src:
            exec(compile(_src.read(), _f, "exec"), {"__name__": "sitecustomize", "__file__": _f})
        break
