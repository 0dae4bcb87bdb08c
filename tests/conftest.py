"""Shared test fixtures: the built tiny models, a private copy of the fixture tree per test that writes,
and helpers that run the real `trl-doctor` command."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
sys.path.append(str(FIXTURES))  # after the installed distributions: PyPI's `build` is `import build`

# fixtures/build_fixtures.py (`python fixtures/build.py` runs it): a name of its own, so the fixtures folder on the
# path shadows no distribution (PyPI's `build`, which the packaging test runs)
import build_fixtures as fixture_build  # noqa: E402

# -- collecting is cheap -------------------------------------------------------------------------------------------
# Every pytest process collects the test modules (each xdist worker does, and CI runs a pytest per lane and step):
# collecting imports no ML stack (a skip condition that asks the installed TRL is a string, evaluated when its test
# is set up; a marker decided at collection reads TRL's files, trl_doctor.facts.trl.installed.trainer_source), and
# pytest keeps each test module's assertion-rewritten code in __pycache__ even where PYTHONDONTWRITEBYTECODE is set
# (CI's machines set it). Measured on CI's venv: a pytest that selected nothing took 25 to 29 s, and takes 4 to 5 s.
HEAVY = ("torch", "transformers", "trl", "datasets", "accelerate", "peft", "vllm", "mlflow", "wandb", "trackio")
COLLECTED_WITH: list[str] = []  # the heavy modules imported by the end of collection (tests/test_architecture.py)
_WRITES_BYTECODE = sys.dont_write_bytecode
sys.dont_write_bytecode = False  # until the test modules are collected (pytest_collection_finish puts it back)


def pytest_collection_finish(session):
    sys.dont_write_bytecode = _WRITES_BYTECODE  # the tests' own imports (a fixture's rewards.py) write no .pyc
    COLLECTED_WITH[:] = [name for name in HEAVY if name in sys.modules]


def trl_has(trainer: str) -> bool:
    """Whether the installed TRL ships `trainer` ("ppo": up to trl 1.12), read from its files, not imported: a marker
    or a skip condition may ask it while the tests are collected."""
    from trl_doctor.facts.trl.installed import trainer_source

    return trainer_source(trainer) is not None


class LazyModule:
    """A module imported when a test first uses it, not when its test module is collected."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        import importlib

        if attr.startswith(("_", "pytest")):  # what collection asks of every module-level name (pytest_*,
            raise AttributeError(attr)  # __wrapped__, _pytestfixturefunction, pytest 9's _mock_name): never imports
        return getattr(importlib.import_module(self._name), attr)


def _default_signals() -> None:
    """Every process the tests start (checks, fork server, workers) gets the default SIGINT and SIGHUP: a test run
    started under nohup or in a non-interactive shell's background ignores both, every child inherits that, and the
    check rightly keeps a signal its caller ignores (tests/test_worker_hygiene.py holds both behaviours)."""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)


_default_signals()


def _one_thread_per_process() -> None:
    """Every process of the test session computes on one thread (OMP_NUM_THREADS=1, unless the caller set it),
    set here, before anything loads torch: OpenMP reads it when the library loads. xdist runs one worker per core, and
    each worker's trainer jobs (the watch's 200-step runs, TRL's and the frameworks' own runs) would otherwise start
    a thread per core: on 2 cores, two healthy 200-step runs side by side took 163 s (5 min of CPU, OpenMP's idle
    threads spinning between the tiny models' ops) and 51 s at one thread each. The doctor's twin steps at one
    thread already (trl_doctor/facts/trainer_run/execute.py); a test of thread counts sets its own."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")


_one_thread_per_process()


@pytest.fixture(autouse=True)
def _no_leaked_environment():
    """What a test's in-process job sets in os.environ (a library's `KMP_DUPLICATE_LIB_OK=True` while a trainer
    runs here) is put back after it: the fork server serves only a caller whose import-time variables are its own,
    so one leaked variable made every later check of that pytest worker start from scratch (CI's healthy sweep went
    from 37 s to 535 s). So is what an in-process check's quieting sets for the trackers (the worker's `quiet`:
    WANDB_MODE, WANDB_DISABLED and its record of the user's values): left behind, it made the environment of a later
    check depend on which tests its pytest worker had run before, and the corpus tests and the accuracy harness,
    each on its own worker, checked every corpus case twice instead of once (tools/accuracy/run.py doctor_run keys a
    check by its environment: about 190 of CI's long-step test-seconds). So is torch's TORCHINDUCTOR_CACHE_DIR, for
    the same reason."""
    from trl_doctor.supervisor.forkserver import _AT_IMPORT_PREFIXES, _AT_RUN_TIME
    from trl_doctor.runtime.quiet import TRACKER_KEYS, USER_TRACKER_ENV

    # the quieting's keys, and TORCHINDUCTOR_CACHE_DIR: torch sets it in the process where its inductor is first
    # imported (and sets it again whenever it needs it)
    quieted = {*TRACKER_KEYS, USER_TRACKER_ENV, "TORCHINDUCTOR_CACHE_DIR"}

    def watched():
        return {k: v for k, v in os.environ.items() if k in quieted or (
            k.startswith(_AT_IMPORT_PREFIXES) and k not in _AT_RUN_TIME and not k.startswith("TRL_DOCTOR_"))}

    before = watched()
    yield
    after = watched()
    for key in after.keys() - before.keys():
        os.environ.pop(key, None)
    for key, value in before.items():
        if after.get(key) != value:
            os.environ[key] = value


def _start_fork_server(folder: Path, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    """A fork server (trl_doctor/supervisor/forkserver.py) starting in `folder` with `env`: (its process, its
    socket)."""
    sock = str(folder / "s")
    proc = subprocess.Popen([sys.executable, *(["-P"] if sys.version_info >= (3, 11) else []), "-m",
                             "trl_doctor.supervisor.forkserver", sock], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    return proc, sock


def _fork_server_up(proc: subprocess.Popen, sock: str) -> str | None:
    """`sock` once its server serves (None where it did not come up within 120 s)."""
    import time

    deadline = time.monotonic() + 120
    while not Path(sock + ".json").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    return sock if Path(sock + ".json").exists() else None


@pytest.fixture(scope="session", autouse=True)
def warm_worker_server(tmp_path_factory):
    """A fork server for the check workers of this session (trl_doctor/supervisor/forkserver.py): every check still runs
    in a fresh worker process of its own, forked from one that imported torch, transformers and TRL once.
    TRL_DOCTOR_TEST_NO_FORKSERVER=1 makes every check start its worker from scratch, as a user's does."""
    if os.environ.get("TRL_DOCTOR_TEST_NO_FORKSERVER"):
        yield None
        return
    proc, sock = _start_fork_server(tmp_path_factory.mktemp("forkserver"))
    sock = _fork_server_up(proc, sock)
    previous = os.environ.get("TRL_DOCTOR_FORKSERVER")
    if sock:
        os.environ["TRL_DOCTOR_FORKSERVER"] = sock
    _RELEASE_SERVERS["folder"] = tmp_path_factory.mktemp("release-forkservers")
    yield sock
    if previous is None:
        os.environ.pop("TRL_DOCTOR_FORKSERVER", None)
    for server in [proc, *(p for p, _ in _RELEASE_SERVERS.pop("started", {}).values())]:
        server.kill()
        server.wait()


# a fork server per release put first on PYTHONPATH (pypi_release's folders): the checks of trl 1.12.0 (PPOTrainer's
# last release) are a dozen, each importing transformers and that TRL from scratch otherwise. The first check of a
# release in this pytest worker runs from scratch; the second starts the release's server and is forked from it, as
# are the rest (a release checked once, as most are, costs what it did: a server started beside its one check took
# the other core's time)
_RELEASE_SERVERS: dict = {}


def _release_server(env: dict) -> str | None:
    """The socket of the fork server for `env`'s PYTHONPATH where it puts a pypi_release folder first and an earlier
    check asked for it; None for the first check, elsewhere, or where it cannot serve."""
    first = (env.get("PYTHONPATH") or "").split(os.pathsep)[0]
    if not first or Path(first).parent != trl_cache() or "folder" not in _RELEASE_SERVERS:
        return None
    asked = _RELEASE_SERVERS.setdefault("asked", set())
    started = _RELEASE_SERVERS.setdefault("started", {})
    if first not in asked:
        asked.add(first)
        return None
    if first not in started:
        folder = _RELEASE_SERVERS["folder"] / str(len(started))
        folder.mkdir()
        started[first] = _start_fork_server(folder, env)
    return _fork_server_up(*started[first])


@contextlib.contextmanager
def exclusive(lock_file: Path):
    """Hold an exclusive lock on `lock_file` (created if missing): pytest-xdist's workers (CI's long tests run on
    two) build the shared fixtures and caches one at a time; the second finds them built."""
    import fcntl

    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def built_fixtures() -> Path:
    """fixtures/ with its tiny models built (once per session, skipped when the stamp is current)."""
    with exclusive(FIXTURES / ".build.lock"):
        fixture_build.build()
    return FIXTURES


@pytest.fixture()
def fixture_copy(built_fixtures, tmp_path) -> Path:
    """A private copy of the fixture tree, for tests that let --fix rewrite files."""
    dest = tmp_path / "fixtures"
    # (not the per-test files other workers make and remove there meanwhile: test_launch_children's cases)
    shutil.copytree(built_fixtures, dest, ignore=shutil.ignore_patterns("__pycache__", "*.trl-doctor.bak*", "_case_*",
                                                                        "out_case_*"))
    return dest


def trl_doctor_exe() -> str:
    exe = Path(sys.executable).with_name("trl-doctor")
    return str(exe) if exe.exists() else "trl-doctor"


def run_doctor(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run the command line. With an `env` (another PYTHONPATH, HF_HOME...) or a `cwd`, or when
    TRL_DOCTOR_TEST_SUBPROCESS=1, it is the installed console script in a fresh process, exactly as a user runs it;
    otherwise the same click command runs in this process, which pays for importing transformers and TRL once
    per test session instead of once per call (the trainer run still gets its own child process)."""
    if env is None and cwd is None and not os.environ.get("TRL_DOCTOR_TEST_SUBPROCESS"):
        return _run_in_process(list(args))
    full_env = dict(os.environ)
    full_env.pop("NO_COLOR", None)
    # an in-process check quieted this session's own environment (WANDB_MODE=disabled, HF_HUB_OFFLINE=1...) and
    # recorded the values it had before: a fresh command gets those back, as a user's shell has them
    from trl_doctor.runtime.quiet import USER_TRACKER_ENV

    recorded = full_env.pop(USER_TRACKER_ENV, None)
    for key, value in (json.loads(recorded) if recorded else {}).items():
        if value is None:
            full_env.pop(key, None)
        else:
            full_env[key] = value
    full_env.update(with_net_audit(env or {}))
    if env and "TRL_DOCTOR_FORKSERVER" in full_env and "TRL_DOCTOR_FORKSERVER" not in env:
        full_env["TRL_DOCTOR_FORKSERVER"] = _release_server(full_env) or full_env["TRL_DOCTOR_FORKSERVER"]
    return subprocess.run([trl_doctor_exe(), *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)


def _run_in_process(args: list[str]) -> subprocess.CompletedProcess:
    from click.testing import CliRunner

    from trl_doctor.front.cli import main

    result = CliRunner().invoke(main, args, catch_exceptions=False)
    return subprocess.CompletedProcess(["trl-doctor", *args], result.exit_code, result.stdout, result.stderr)


def run_json(*args: str, **kw) -> tuple[int, dict]:
    proc = run_doctor(*args, "--format", "json", **kw)
    assert proc.stdout, f"no report on stdout; stderr:\n{proc.stderr}"
    return proc.returncode, json.loads(proc.stdout)


# the options of `check` the rule harness takes as the command line does (trl_doctor.testing): value-taking ones
_HERE_VALUES = {"--select": "select", "--target": "target", "--target-env": "target_env", "--fail-on": "fail_on",
                "--num-processes": "num_processes"}


def check_here(config, *args: str, gpus=None) -> tuple[int, dict]:
    """run_json("check", CONFIG, *args) judged in this process by the rule harness (trl_doctor.testing), with no
    worker started: (exit status, {"results": [...]}, each as the json format gives it). Arguments it does not take
    (--fix, --diff, --static, a launch...) go to the real command as run_json sends them. `gpus`: the GPUs NVML
    answers for meanwhile (tests/fake_nvml's stand-in, as TRL_DOCTOR_FAKE_GPUS gives them: a file, or its JSON)."""
    if gpus is not None:
        import tempfile

        from test_fixture_cases import fake_nvml

        with tempfile.TemporaryDirectory() as folder:
            spec = Path(folder) / "gpus.json"
            spec.write_text(gpus.read_text() if isinstance(gpus, Path) else str(gpus))
            with fake_nvml(spec):
                return check_here(config, *args)
    options: dict = {}
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "--no-smoke":
            options["smoke"] = False
        elif arg in _HERE_VALUES and rest and _takes(arg, rest[0]):
            value = rest.pop(0)
            options[_HERE_VALUES[arg]] = int(value) if arg == "--num-processes" else value
        else:  # what the command line's own parsing must judge (a bad value is its exit 2), or its own options
            return run_json("check", str(config), *args)
    if options.get("smoke") is not False and _reads_the_trainer_run(options.get("select", "")):
        return run_json("check", str(config), *args)  # the trainer run: in the worker, under its limits
    from trl_doctor.testing import judge_rules

    judged = judge_rules(config, options.pop("select", ()), **options)
    return (judged[0].code if judged else 0), {"results": [j.as_dict() for j in judged]}


def _takes(option: str, value: str) -> bool:
    """Whether `value` is one the command line's parsing accepts for `option` (click's types and choices)."""
    if option == "--num-processes":
        return value.isdigit() and int(value) >= 1
    if option == "--fail-on":
        return value in ("fail", "warn")
    if option == "--target-env":
        return value in ("auto", "this", "other")
    return not value.startswith("-")


def _reads_the_trainer_run(select: str) -> bool:
    """Whether the rules --select names (every rule when empty; names as the registry reads them, plugins' too)
    include one that reads the trainer run. A name the registry refuses goes to the command, which says so."""
    from trl_doctor.front.settings import names
    from trl_doctor.registry import RegistryError, all_rules, select_rules

    try:
        chosen = select_rules(all_rules(), names(select))
    except RegistryError:
        return True
    return any("trainer_run" in r.needs for r in chosen)


def result_of(report: dict, rule: str) -> dict:
    hits = [r for r in report["results"] if rule in (r["id"], r["rule"])]
    assert len(hits) == 1, f"{rule} not in {[r['id'] for r in report['results']]}"
    return hits[0]


def rule_in_this_process(config, slug: str) -> tuple[int, dict]:
    """(exit status, json result) of one rule run by the engine in this process: a check's rules run in a worker
    process, which a monkeypatch made here does not reach."""
    from trl_doctor.context.config import load_config
    from trl_doctor.context.context import Context, Options
    from trl_doctor.types import exit_status
    from trl_doctor.engine import run_rule
    from trl_doctor.report.formats import result_dict
    from trl_doctor.registry import builtin_rules

    (the_rule,) = [r for r in builtin_rules() if r.slug == slug]
    with Context(load_config(config), Options(smoke=False)) as ctx:
        result = run_rule(the_rule, ctx)
    return exit_status([result]), result_dict(result)


def real_trl(release: str, trainer: str = "ppo") -> dict:
    """The real trl `release` from PyPI, installed without dependencies into a cache folder (kept between runs),
    put first on PYTHONPATH so that the doctor reads and imports it instead of the installed TRL (skipped where its
    `trainer` does not import with the installed transformers)."""
    env = pypi_release("trl", release)
    return _importable_trl(Path(env["PYTHONPATH"]), release, trainer)


def trl_cache() -> Path:
    """The folder of the releases pypi_release installs (kept between runs)."""
    return Path(os.environ.get("TRL_DOCTOR_TRL_CACHE", Path.home() / ".cache" / "trl-doctor-ci"))


def pypi_release(package: str, release: str, module: str | None = None) -> dict:
    """`package==release` from PyPI without its dependencies, in a cache folder kept between runs (one install at a
    time): the PYTHONPATH that puts it first. Skipped where it cannot be installed."""
    cache = trl_cache() / f"{package}-{release}"
    with exclusive(cache.parent / f".{package}-{release}.lock"):
        if not (cache / (module or package)).is_dir():
            proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(cache),
                                   f"{package}=={release}"], capture_output=True, text=True)
            if proc.returncode != 0:
                pytest.skip(f"{package}=={release} cannot be installed here: {proc.stderr.strip().splitlines()[-1:]}")
    return {"PYTHONPATH": str(cache)}


def _importable_trl(cache: Path, release: str, trainer: str = "ppo") -> dict:
    # the doctor imports the release's trainer: that must work with the installed transformers (trl 1.12.0
    # needs >= 4.56.2, so the legacy lane cannot run it; trl 1.13 and later have no PPOTrainer)
    why = _import_probe(cache, trainer)
    if why is not None:
        pytest.skip(f"trl {release}'s {trainer} trainer does not import with transformers {version('transformers')}: "
                    f"{why}")
    return {"PYTHONPATH": str(cache)}


def _import_probe(cache: Path, trainer: str) -> str | None:
    """None where the release in `cache` imports its `trainer` beside this environment's packages, else the import's
    last line. The answer is kept in `cache` under a key of everything it depends on (this Python, the installed
    stack's releases as the accuracy record reads them, the trainer, the doctor's lookup of it): each probe is a fresh
    interpreter importing torch, transformers and TRL, seconds of CPU, and one lane asks the same question of the same
    release a score of times. A probe killed by a signal (a machine out of memory) answers, but is not kept."""
    import hashlib

    from trl_doctor.watch import write_atomic
    from truths import record_module

    lookup = (ROOT / "trl_doctor" / "facts" / "trl" / "installed.py").read_bytes()  # the doctor's side of the probe
    key = hashlib.sha256(json.dumps([sys.executable, sys.version, trainer, record_module()._releases({}),
                                     hashlib.sha256(lookup).hexdigest()]).encode()).hexdigest()[:16]
    answer = cache / f".import-probe-{key}.json"
    with contextlib.suppress(OSError, ValueError):
        return json.loads(answer.read_text())["why"]
    probe = subprocess.run([sys.executable, "-c",
                            f"from trl_doctor.facts.trl.installed import trainer_class; assert trainer_class({trainer!r})"],
                           env={**os.environ, "PYTHONPATH": str(cache)}, capture_output=True, text=True)
    why = None if probe.returncode == 0 else (probe.stderr.strip().splitlines() or ["?"])[-1]
    if probe.returncode >= 0:
        with contextlib.suppress(OSError):
            write_atomic(answer, json.dumps({"why": why}))
    return why


# The README's plain `python -m pytest` runs the fast tests and one real trainer step per trainer (`core`); the
# rest is selected by marker: CI's default lane runs `-m "boundary and not slow and not sweep and not other_trl"`
# and `-m "(slow or sweep or other_trl) and not core"` after it.
LONG_MARKS = ("slow", "sweep", "other_trl", "boundary")


@functools.cache
def accuracy_harness():
    """tools/accuracy/run.py, loaded once per process (as `accuracy_run`: its dataclasses name that module)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("accuracy_run", ROOT / "tools" / "accuracy" / "run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["accuracy_run"] = module
    spec.loader.exec_module(module)
    return module


NET_AUDIT = Path(__file__).resolve().parent / "netaudit"  # tests/netaudit/sitecustomize.py: the network audit
NET_AUDIT_ENV = "TRL_DOCTOR_TEST_NET_AUDIT"


def pytest_configure(config):
    """Issue 42: the whole session runs under the network audit (tests/netaudit/sitecustomize.py) in this process and,
    through PYTHONPATH, in every Python process the tests start. The controlling process names the log (xdist's
    workers inherit it) and fails the session when anything outside loopback was contacted or looked up."""
    # the jobs the tests train in this process (DoctorCallback's runs) load their datasets from local files: datasets'
    # load counter and its hub look-ups stay off. (Not HF_HUB_OFFLINE: transformers 5 then writes local_files_only
    # into the tokenizer files the fixtures' builder saves, which their snapshots record.)
    for key in ("HF_DATASETS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
        os.environ.setdefault(key, "1")
    if not os.environ.get(NET_AUDIT_ENV):
        import tempfile

        fd, log = tempfile.mkstemp(prefix="trl-doctor-net-audit-", suffix=".log")
        os.close(fd)
        os.environ[NET_AUDIT_ENV] = log
        config._net_audit_owner = True
        os.environ["PYTHONPATH"] = os.pathsep.join([str(NET_AUDIT), *filter(None, [os.environ.get("PYTHONPATH")])])
    # tools/accuracy/run.py's doctor_run keeps each `check` of a case in the folder its REPORTS_ENV names: the corpus
    # tests and the accuracy harness check the same corpus cases (same command, folder and environment) once
    reports = accuracy_harness().REPORTS_ENV
    if not os.environ.get(reports):  # the controlling process: one folder for the whole session's workers
        import tempfile

        os.environ[reports] = tempfile.mkdtemp(prefix="trl-doctor-reports-")
        config._reports_owner = True
    import importlib.util

    spec = importlib.util.spec_from_file_location("_trl_doctor_net_audit", NET_AUDIT / "sitecustomize.py")
    spec.loader.exec_module(importlib.util.module_from_spec(spec))  # installs the hook once per process
    if not hasattr(config, "workerinput"):  # the controlling process, before xdist's workers start
        compile_the_doctor()


def compile_the_doctor() -> None:
    """Byte-compile trl-doctor's own modules where they are imported from (an editable install's tree). Where
    PYTHONDONTWRITEBYTECODE is set (CI's machines set it) no import writes a .pyc, so every doctor and worker process
    the tests start would compile its 168 modules again: `trl-doctor rules` took 0.6 s that way and 0.17 s compiled.
    compileall writes whatever the variable says, skips what is up to date, and replaces each file atomically."""
    import compileall
    import importlib.util

    for package in ("trl_doctor", "trl_doctor.rules"):
        spec = importlib.util.find_spec(package)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            compileall.compile_dir(folder, quiet=1, maxlevels=20)


def net_audit_lines() -> list[str]:
    """What the audit logged so far this session (contacts and look-ups outside loopback)."""
    try:
        return Path(os.environ[NET_AUDIT_ENV]).read_text(encoding="utf-8").splitlines()
    except (KeyError, OSError):
        return []


def with_net_audit(env: dict) -> dict:
    """`env` for a process a test starts with a PYTHONPATH of its own: the audit's folder last on it (a test's own
    sitecustomize.py, a broken environment it stages, comes first and wins)."""
    if "PYTHONPATH" in env and str(NET_AUDIT) not in env["PYTHONPATH"].split(os.pathsep):
        env = {**env, "PYTHONPATH": os.pathsep.join([*filter(None, [env["PYTHONPATH"]]), str(NET_AUDIT)])}
    return env


def pytest_sessionfinish(session, exitstatus):
    if getattr(session.config, "_reports_owner", False):
        shutil.rmtree(os.environ.pop(accuracy_harness().REPORTS_ENV), ignore_errors=True)
    if not getattr(session.config, "_net_audit_owner", False):
        return
    lines = net_audit_lines()
    os.unlink(os.environ[NET_AUDIT_ENV])
    if lines:
        session.exitstatus = 1
        sys.stderr.write(f"\nFAILED: the network audit saw {len(lines)} connection(s) or look-up(s) outside loopback "
                         "(issue 42: the doctor contacts only this machine unless --allow-host names a host):\n"
                         + "\n".join(lines[:50]) + "\n")


def pytest_addoption(parser):
    parser.addoption("--all-tests", action="store_true",
                     help="run the slow, sweep, other_trl and boundary tests too, as CI's default lane does (fuzz stays -m "
                          "fuzz)")
    parser.addoption("--snapshot-update", action="store_true",
                     help="write the fixture cases' snapshot files that are missing or differ, and delete those of no "
                          "case (tests/case_snapshots.py; also TRL_DOCTOR_SNAPSHOT_UPDATE=1)")


def _named_on_command_line(config, item) -> bool:
    """A test named by its node id on the command line runs whatever its markers say."""
    return any("::" in arg and item.nodeid.startswith(arg.split("/tests/", 1)[-1].removeprefix("./")) for arg in config.args)


def pytest_collection_modifyitems(config, items):
    """Tests marked `fuzz` (the whole fuzz suite) run only when asked for: `-m fuzz` (or any -m naming fuzz).
    With no `-m` (and no --all-tests) the long tests (LONG_MARKS) are left out too, except those marked `core`.
    Nothing is selected by the date: every test of a selection runs every time."""
    markexpr = config.getoption("markexpr") or ""
    short = not markexpr and not config.getoption("all_tests")
    dropped, kept = [], []
    for item in items:
        marks = {m.name for m in item.iter_markers()}
        if "fuzz" in marks and "fuzz" not in markexpr:
            dropped.append(item)
        elif (short and marks.intersection(LONG_MARKS) and "core" not in marks
              and not _named_on_command_line(config, item)):
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    config._long_left_out = sum(1 for item in dropped if "fuzz" not in {m.name for m in item.iter_markers()})


def pytest_runtest_setup(item):
    """A test marked gpu is skipped without a CUDA GPU: asked when it is set up, so that collecting imports no torch."""
    if item.get_closest_marker("gpu") is not None:
        import torch

        if not torch.cuda.is_available():
            pytest.skip("needs a CUDA GPU (the gpu lane: benchmarks/gpu_session.sh)")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    left = getattr(config, "_long_left_out", 0)
    if left:
        terminalreporter.write_line(f"{left} long tests (marked slow, sweep, other_trl or boundary) were left out: "
                                    "--all-tests or -m runs them (CI's default lane does)")


def long_prompts_config(folder: Path, reward_source: str) -> Path:
    """A GRPO config that fails context-length statically (fixtures/context-length/bad_long_prompts.yaml: 5 prompts
    of ~1300 tokens in 512 positions) while its trainer still builds and steps, with `rewards.length_reward` from
    `reward_source` (a test's own reward: one that marks or waits)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rewards.py").write_text(reward_source)
    cfg = folder / "long_prompts.yaml"
    cfg.write_text(f"model_name_or_path: {FIXTURES / 'models' / 'qwen2-chat'}\n"
                   f"dataset_path: {FIXTURES / 'data' / 'long_prompts.jsonl'}\n"
                   "reward_funcs: [rewards.length_reward]\nnum_generations: 2\nper_device_train_batch_size: 2\n"
                   "max_completion_length: 64\n")
    return cfg


@pytest.fixture(scope="session")
def corpus_models() -> Path:
    """The corpus's stand-in models (corpus/build.py), built once: one xdist worker builds, the other waits on the
    lock and finds them built (two builds at once write the same files)."""
    with exclusive(ROOT / "corpus" / ".build.lock"):
        proc = subprocess.run([sys.executable, str(ROOT / "corpus" / "build.py")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return ROOT / "corpus" / "models"


TIMES_ENV = "TRL_DOCTOR_TEST_TIMES"
_TIMES: dict[str, list] = {}  # node id -> [seconds so far, outcome]


def pytest_runtest_logreport(report):
    """TRL_DOCTOR_TEST_TIMES=FILE appends each test's seconds (set-up, call and tear-down together) to FILE, one
    tab-separated line: seconds, outcome, the Python installation that ran it (CI's lanes apart), node id. Written by
    the controlling process only (xdist forwards its workers' reports to it), so each test is one line."""
    path = os.environ.get(TIMES_ENV)
    if not path or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    seen = _TIMES.setdefault(report.nodeid, [0.0, "passed"])
    seen[0] += report.duration
    if seen[1] == "passed":  # the first phase that did not pass says what became of the test
        seen[1] = report.outcome
    if report.when == "teardown":
        seconds, outcome = _TIMES.pop(report.nodeid)
        with open(path, "a", encoding="utf-8") as out:
            out.write(f"{seconds:.2f}\t{outcome}\t{sys.prefix}\t{report.nodeid}\n")
