"""The check's one heavy worker: the only process of a check that imports torch, transformers and TRL.

It loads the config, builds the context, runs the rules in run order (the static group, then the rules
that read the trainer run) and streams each rule's Result to the printing process as soon as it is
known. The trainer run happens here too, after the static rules, so the heavy stack is imported once.
What the user's code prints (reward functions, the trainer) goes to the worker's log, never the report. The user's
code runs inside the fence (trl_doctor.runtime.fence), set up here: its messages go on the channel, its limit is
--user-code-timeout, and a result whose rule ran user code that changed an input file becomes a fail. The network
namespace (trl_doctor.runtime.netns, `isolate`) and guard (trl_doctor.runtime.network) are set up here too: the worker connects to this machine and the --allow-host
hosts only, and what the user's code tried to reach beyond them is said in the result (or the launch's notes).

Run as `python -P -m trl_doctor.worker.main` with the Request on stdin and the channel's file descriptor in
TRL_DOCTOR_CHANNEL_FD; the fork server (`trl_doctor.supervisor.forkserver`) calls `serve` directly. Either way the worker first
takes its channel (`open_channel`: moved to a high descriptor that no process it starts inherits) and becomes the
subreaper of what it starts (trl_doctor.runtime.tree); when it is done it ends every process it still has (`end_own_tree`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable

from trl_doctor.runtime import fence as _fence
from trl_doctor.runtime import network as _network
from trl_doctor.runtime import tree as _tree
from trl_doctor.protocol import (CHANNEL_LOST, BadInput, CaptureAgain, Done, Message, Request, RuleResult, RuleStart,
                                 WillRun)
from trl_doctor.capture.report import adapt
from trl_doctor.capture.world import NeedsOneProcess
from trl_doctor.runtime.quiet import quiet_environment

CHANNEL_ENV = "TRL_DOCTOR_CHANNEL_FD"
CHANNEL_MIN_FD = 10  # the channel's descriptor is moved at least this high: user code that dup2()s onto 3.. misses it


def serve(request: Request, send: Callable[[Message], None]) -> None:
    """Run the request's rules and send every message; an input error ends the check (exit status 2)."""
    from trl_doctor.context.config import load_config
    from trl_doctor.errors import InputError
    from trl_doctor.registry import RegistryError, all_rules

    quiet_environment()
    options = _limit_memory(request.options)
    live = None
    try:
        _network.guard(_network.parse_hosts(options.allow_hosts))
    except ValueError as exc:  # the front door parsed them already: a request made by hand
        send(BadInput(f"allow_hosts: {exc}"))
        return
    try:
        by_id = {r.id: r for r in all_rules()}
        rules = [by_id[i] for i in request.rules if i in by_id]
        if options.launch is not None:
            try:
                cfg, live = _capture(options, send)
            except NeedsOneProcess as exc:  # a fresh worker captures the script again at one process
                send(CaptureAgain(options.num_processes or 0, str(exc)))
                return
        else:
            cfg = load_config(request.config)
    except (InputError, RegistryError) as exc:
        send(BadInput(str(exc)))
        return
    _fence.configure(send, options.user_code_timeout, request.failed, _input_files(cfg),
                     (os.getcwd(), getattr(getattr(cfg, "path", None), "parent", None)))
    try:
        _run_rules(request, rules, cfg, options, live, send)
    finally:
        _fence.configure()


def _limit_memory(options):
    """Set the worker's address-space limit (trl_doctor/runtime/limits.py; none where it may use CUDA); the options with
    the limit recorded, for the message when a rule hits it."""
    import dataclasses

    from trl_doctor.context.context import has_cuda
    from trl_doctor.runtime.limits import apply_memory_limit, memory_limit

    uses_cuda = options.device == "cuda" or (options.device == "auto" and has_cuda(options))
    limit = memory_limit(options.max_memory, uses_cuda)
    apply_memory_limit(limit)
    return dataclasses.replace(options, memory_limit=limit)


def _run_rules(request: Request, rules: list, cfg, options, live, send: Callable[[Message], None]) -> None:
    from trl_doctor.context.context import Context
    from trl_doctor.engine import each_result
    from trl_doctor.errors import InputError

    if live is None:
        cfg = typed_as_trl(cfg)
    todo = [r for r in rules if r.id not in request.done]
    with Context(cfg, options, live) as ctx:
        ctx.events = send
        if not request.done:  # a resumed check's first worker said it already
            _send_will_run(ctx, send)
        try:
            for result in each_result(todo, ctx, starting=lambda r: send(RuleStart(r.id))):
                if live is not None:
                    result = adapt(result, cfg, live)
                result = _processes_left(_inputs_kept(result, _fence.take_changes()), _fence.take_left())
                result = _files_created(result, _fence.take_created())
                send(RuleResult(_connections_refused(result, _network.take_refused())))
        except InputError as exc:
            send(BadInput(str(exc)))
            return
    send(Done())


def _send_will_run(ctx, send: Callable[[Message], None]) -> None:
    """What will run, for the report's head (trl_doctor.facts.launch.will_run): read from the facts the rules read
    anyway (cached for them); never a reason for the check to stop."""
    from trl_doctor.facts.launch.will_run import what_will_run

    try:
        plan = what_will_run(ctx)
    except Exception as exc:  # a shape of config this code has not met: the rules still run and say what they find
        print(f"trl-doctor: what will run: {type(exc).__name__}: {exc}", file=sys.stderr)
        return
    if plan is not None and plan.lines:
        send(WillRun(plan.title, dict(plan.lines)))


def _input_files(cfg) -> tuple:
    """The check's inputs whose size and mtime the fence compares around the user's code."""
    folders = [getattr(getattr(cfg, name, None), "path", None) for name in ("model", "tokenizer")]
    return _fence.input_files(getattr(cfg, "path", None), getattr(cfg, "dataset_file", None),
                              getattr(cfg, "dataset_dir", None), *folders)


def _inputs_kept(result, changes: list[str]):
    """`result`, or a fail when the user's code it ran changed or removed one of the check's input files. (The
    doctor cannot stop a process from deleting or rewriting files the user may change: it can only say so.)"""
    if not changes:
        return result
    import dataclasses

    from trl_doctor.types import Status

    message = (f"{changes[0]} while the check ran: the check's input files must not change under it, and training runs "
               "the same code; restore the files and rerun the check")
    details = dict(result.details, **{"input files changed": changes,
                                      "result before": f"{result.status.value}: {result.message}"})
    return dataclasses.replace(result, status=Status.FAIL, message=message, details=details, fix=None)


def _processes_left(result, left: list[str]):
    """`result` with the processes its rule's user code started and left running named in its details (they are
    ended when the worker ends: a reward module's pool may serve the calls after its import)."""
    if not left:
        return result
    import dataclasses

    return dataclasses.replace(result, details=dict(result.details, **{"processes left running by user code": left}))


def _files_created(result, created: list[str]):
    """`result` with what its rule's user code created in the check's folders named in its details: held in the
    check's own layer where the folder is held (trl_doctor.runtime.hold), else left in place (the job's own run of that
    code will write it too); said either way, so that a check is never silent about what it wrote."""
    if not created:
        return result
    import dataclasses

    where = _placement([c.rsplit(": created ", 1)[-1] for c in created])
    return dataclasses.replace(result, details=dict(result.details, **{f"files created by user code ({where})": created}))


def _placement(paths: list[str]) -> str:
    """Where what the check's processes wrote at `paths` went, in words: "held: ..." where every path lies in a held
    folder, else "left in place"."""
    from trl_doctor.runtime import hold as _hold

    if paths and all(_hold.holder(p) is not None for p in paths):
        return "held in the check's own layer, gone with it: not written into your folder"
    return "left in place"


def _connections_refused(result, refused: list):
    """`result` with the connections to other machines its rule's code was refused named in its details; a fail or an
    error that followed one cannot be judged here (the job, on its own network, makes that connection): a skip that
    says how to allow the host."""
    if not refused:
        return result
    import dataclasses

    from trl_doctor.types import Status

    details = dict(result.details, **{"connections not made (another machine)": _refused_words(refused)})
    if result.status not in (Status.FAIL, Status.ERROR):
        return dataclasses.replace(result, details=details)
    first = refused[0]
    details["result before"] = f"{result.status.value}: {result.message}"
    message = (f"not judged here: the code this rule runs asked for {first.words()}, another machine, which "
               f"trl-doctor does not contact unless asked; pass {_network.ALLOW_OPTION} {first.target()} to let it, "
               f"or check on a machine of the job's network with that host allowed")
    return dataclasses.replace(result, status=Status.SKIP, message=message, details=details, fix=None)


def _refused_words(refused: list) -> list[str]:
    """What the guard refused, each once, in words (trl_doctor.runtime.network.Refusal.words)."""
    return list(dict.fromkeys(r.words() for r in refused))


def _capture(options, send: Callable[[Message], None]):
    """Run the launch command until it builds its trainer; the check's config and live objects from what it built."""
    from trl_doctor.context.context import has_cuda
    from trl_doctor.capture.command import LaunchCommand
    from trl_doctor.capture.report import describe
    from trl_doctor.capture.run import capture
    from trl_doctor.capture.to_config import to_config

    command = LaunchCommand.from_json(options.launch)
    folder = _fence.watch((command.cwd,))
    captured = capture(command, timeout=options.script_timeout, load_weights=options.load_weights,
                       has_cuda=has_cuda(options), trust_remote_code=options.trust_remote_code,
                       verbose=options.verbose, on_timeout=lambda text: send(BadInput(text)),
                       asked_processes=options.num_processes, launch_gpus=_launch_gpus(options),
                       one_process_why=options.one_process_why)
    cfg, live = to_config(captured)
    created = _fence.created_since(folder)
    created += [p for p in _held_writes() if p not in created]
    send(_with_refused(_with_created(describe(cfg, live), created), _network.take_refused()))
    return cfg, live


def _launch_gpus(options) -> int:
    """The launch machine's GPUs: --target's, else the ones this machine's torch sees (CUDA_VISIBLE_DEVICES applied)."""
    if options.target:
        from trl_doctor.context.target import target_gpus

        return len(options.target_gpus or target_gpus(options.target))
    if options.device == "cpu":
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _with_refused(message, refused: list):
    """The `captured` message with what the script tried to reach on another machine as a note: the guard refused it
    (the script saw an OSError and went on to build its trainer)."""
    if not refused:
        return message
    import dataclasses

    note = (f"the launch command's script asked for {', '.join(_refused_words(refused))}: not contacted (another machine; trl-doctor contacts one "
            f"only when {_network.ALLOW_OPTION} names it)")
    return dataclasses.replace(message, notes=(*message.notes, note))


def _held_writes() -> list[str]:
    """What the launch wrote into the held folders beyond the working directory (an --output_dir elsewhere): the
    upper layers' entries there (the working directory's own are the fence's, above)."""
    from trl_doctor.runtime import hold as _hold

    cwd = os.getcwd().rstrip("/") + "/"
    return [p for p in _hold.written() if not p.startswith(cwd)]


def _with_created(message, created: list[str]):
    """The `captured` message with what the script created in the working directory as a note (issue 30, class 9):
    held or left in place, as what rewards create is, and said, so that a check is never silent about what it wrote."""
    if not created:
        return message
    import dataclasses

    note = f"the launch command's script created {', '.join(created)} ({_placement(created)})"
    return dataclasses.replace(message, notes=(*message.notes, note))


def typed_as_trl(cfg):
    """The config's values read through TRL's own parser before any rule reads them (`2e-5` is a float to TRL);
    unchanged when the parser cannot be asked (trainer-config reports why)."""
    from trl_doctor.facts.trl import trainer_config

    try:
        return trainer_config.typed_as_trl(cfg)
    except Exception:
        return cfg


def _die_with_parent() -> None:
    """Linux: the kernel kills this worker when the process that started it dies, even by SIGKILL (a CI job's
    timeout, an OOM kill of the CLI), so no hung worker outlives its check."""
    parent = os.getppid()
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the call
        os._exit(1)


def open_channel(fd: int) -> Callable[[Message], None]:
    """`send` for the channel on descriptor `fd` (each message one line, `Message.to_line`): moved to a close-on-exec descriptor >= CHANNEL_MIN_FD (inherited by
    no process the user's code starts), written with no buffering left behind. A channel that cannot be written (the
    user's code closed it) ends the worker with CHANNEL_LOST, which the supervisor names."""
    import fcntl

    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, CHANNEL_MIN_FD)
    os.close(fd)
    write, fstat = os.write, os.fstat
    pipe = _identity(fstat(high))

    def send(message: Message) -> None:
        data = message.to_line().encode("utf-8")
        try:
            if _identity(fstat(high)) != pipe:  # closed, and its number taken by another file (dup2, open)
                raise OSError("the channel's descriptor is no longer the channel")
            while data:
                data = data[write(high, data):]
        except OSError:
            end_own_tree()
            os._exit(CHANNEL_LOST)

    return send


def _identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def own_tree() -> None:
    """Become the subreaper of every process the worker starts, so a double-forked daemon stays its descendant."""
    _tree.become_subreaper()


def end_own_tree() -> None:
    """Kill every process the worker (its user code) started and left running."""
    for pid in _tree.descendants(os.getpid()):
        try:
            os.kill(pid, 9)
        except OSError:
            pass


def isolate(request: Request) -> None:
    """Move the worker into namespaces of its own before anything of the user's runs (trl_doctor.runtime.netns): a
    network namespace (no process of the check has a route to another machine; this machine's servers stay
    reachable) and a mount namespace holding the working directory, the config's folder and the folders the config
    and a launch's command line name (trl_doctor.runtime.hold: what the check's processes write there lands in a layer inside the
    check's folder). Where the system does not allow it the in-process guard alone holds, as the report's settings
    say, and what is written is left in place."""
    from trl_doctor.runtime import hold as _hold
    from trl_doctor.runtime import netns as _netns
    from trl_doctor.runtime import tmp as _tmp

    try:
        allowed = _network.parse_hosts(request.options.allow_hosts)
    except ValueError:
        return  # serve says so, as one line
    check_dir = os.environ.get(_tmp.DIR_ENV)
    folders = [os.getcwd()] + ([os.path.dirname(os.path.abspath(request.config))] if request.config else [])
    # the folders the config and a launch's command line name: an --output_dir elsewhere, a recipe's folder and
    # the paths inside it
    named = ([request.config] if request.config else []) + list((request.options.launch or {}).get("argv") or ())
    folders += _hold.named_folders(named, os.getcwd())
    try:
        _netns.isolate(allowed, folders, Path(check_dir) / "held" if check_dir else None)
    except Exception as exc:  # a system this code has not met: the guard alone, and the log says why
        print(f"trl-doctor: no namespaces: {type(exc).__name__}: {exc}", file=sys.stderr)


def main() -> int:
    _die_with_parent()
    own_tree()
    send = open_channel(int(os.environ.pop(CHANNEL_ENV)))
    request = Request.from_json(sys.stdin.read())
    isolate(request)
    try:
        serve(request, send)
    finally:
        end_own_tree()
    return 0


def exit_now(code: int) -> None:
    """End the worker without the interpreter's teardown, as the fork server's workers end: the supervisor waits
    for this exit before it prints the report, and with torch, transformers and TRL loaded the teardown (module
    finalizers, atexit hooks, freeing every object) took seconds. Nothing of the check is lost: every message was
    written unbuffered, the context removed its folder, `end_own_tree` ended the processes left, and the supervisor
    removes the check's folder."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a stream the user's code closed
            pass
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
