"""Issue 46, item 3: TRL's AsyncGRPOTrainer (trl.experimental.async_grpo, trl >= 1.10) is a checked trainer.

The script is TRL's own example (examples/scripts/async_grpo.py at f2cd57710, fixtures/launch/async_grpo_example.py),
run by the installed TRL: AsyncGRPOTrainer's own set-up runs for real (on the meta-device model) up to transformers'
constructor, where the capture stops it and records it as kind `async_grpo`. async-grpo-setup (TD023) judges what is
known before launch; the rules written for GRPOTrainer say why they do not judge it; the rules open to any trainer
(and version-skew, model-files) judge it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_doctor

LAUNCH = Path(__file__).resolve().parent.parent / "fixtures" / "launch"
SCRIPT = "async_grpo_example.py"


def _has_async_grpo() -> bool:
    from trl_doctor.facts.trl.installed import trl_root

    root = trl_root()
    return root is not None and (root / "experimental" / "async_grpo" / "async_grpo_trainer.py").is_file()


pytestmark = [pytest.mark.usefixtures("built_fixtures"), pytest.mark.trl_pair,
              pytest.mark.skipif(not _has_async_grpo(), reason="the installed TRL has no AsyncGRPOTrainer (trl >= "
                                 "1.10)")]


def _check(*options: str, launch: tuple[str, ...] = ("python", SCRIPT)) -> tuple[int, dict]:
    proc = run_doctor("check", "--no-smoke", *options, "--format", "json", "--", *launch, cwd=LAUNCH)
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def _line_of(text: str) -> int:
    return next(i for i, line in enumerate((LAUNCH / SCRIPT).read_text().splitlines(), 1) if text in line)


def _result(report: dict, slug: str) -> dict:
    return next(r for r in report["results"] if r["rule"] == slug)


def test_trls_async_grpo_example_is_checked_as_async_grpo():
    """TRL's example as its docstring launches it (one process): recognized, judged by async-grpo-setup and the
    rules that judge any trainer, and every GRPO rule says why it does not judge it. Nothing fails."""
    code, report = _check()
    assert code == 0, report
    assert report["trainer"] == "async_grpo"
    setup = _result(report, "async-grpo-setup")
    assert setup["status"] == "pass", setup
    assert "kernels-community/flash-attn3" in setup["details"]["attention kernel"]
    for slug in ("version-skew", "model-files", "save-outputs"):
        assert _result(report, slug)["status"] == "pass", _result(report, slug)
    for slug in ("smoke-step", "batch-geometry", "logits-contract", "distributed-setup"):
        r = _result(report, slug)
        assert r["status"] == "skip" and r["message"].startswith("not judged for AsyncGRPOTrainer"), r
    assert "needs its `vllm serve`" in _result(report, "smoke-step")["message"]


def test_a_lambda_reward_fails_where_trls_rollout_worker_would_pickle_it():
    """AsyncRolloutWorker.start() pickles the rewards for its spawned child when training starts; a lambda inside
    main() cannot be pickled. The finding points at the lambda's line."""
    code, report = _check("--select", "async-grpo-setup", launch=("python", SCRIPT, "-", "lambda"))
    setup = _result(report, "async-grpo-setup")
    assert code == 1 and setup["status"] == "fail", setup
    assert setup["message"].startswith("reward_funcs[0] (main.<locals>.<lambda>) cannot be pickled"), setup
    assert "so they must be picklable" in setup["message"]
    assert setup["location"]["line"] == _line_of("reward = (lambda completions")


@pytest.mark.slow  # seconds long (a trainer run or a process of its own): CI's long selection
def test_trls_own_refusal_of_a_lora_on_lm_head_is_a_finding_with_its_words():
    """AsyncGRPOTrainer.__init__ refuses a LoRA on lm_head before transformers' constructor. The doctor reports TRL's
    words as async-grpo-setup's fail (not an exit 2); the script itself, run for real on this CPU, raises the same."""
    code, report = _check("--select", "async-grpo-setup,peft-setup", launch=("python", SCRIPT, "-", "lora_head"))
    setup = _result(report, "async-grpo-setup")
    assert code == 1 and setup["status"] == "fail", setup
    assert "does not support a PEFT adapter on `lm_head`" in setup["message"], setup
    assert "async_grpo_trainer.py:" in setup["message"]
    real = subprocess.run([sys.executable, SCRIPT, "-", "lora_head"], cwd=LAUNCH, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "FIXTURE_ON_CPU": "1"})
    assert real.returncode != 0 and "does not support a PEFT adapter on `lm_head`" in real.stderr, real.stderr[-2000:]


def test_fsdp2_on_eight_v100s_without_the_packages():
    """TRL's fsdp2.yaml (8 processes) on 8 V100s, judged as the launch's environment (--target-env this: vllm and
    kernels are not installed here): vllm (at the weight-transfer client TRL builds first for a full-weight sync, as
    TRL's own run on an H100 stopped), the kernels package, FlashAttention-3 on compute capability 7.0, and the
    multi-rank FSDP2 weight sync (trl#7103) are each a fail."""
    code, report = _check("--target", "8xV100-32GB", "--target-env", "this", "--select", "async-grpo-setup",
                          launch=("accelerate", "launch", "--config_file", "fsdp2.yaml", SCRIPT))
    setup = _result(report, "async-grpo-setup")
    assert code == 1 and setup["status"] == "fail", setup
    said = [setup["message"], *setup["details"].get("also", [])]
    for words in ("vLLM is required to use WeightTransferClient", "`kernels` is not installed",
                  "Tesla V100-SXM2-32GB is older", "8 processes under FSDP"):
        assert any(words in s for s in said), (words, said)
    assert "trl#7103" in said[-1] and "send_weights(self._streaming_iter())" in setup["details"]["weight sync code"]


def test_two_fsdp2_processes_with_a_lora_warn_and_name_the_adapter_path():
    """Two FSDP2 processes with a LoRA: a warn (trl#6797 saw two ranks get through; a server started with
    --enable-lora takes the adapter as files, without the NCCL sync); the H100s suit the kernel."""
    code, report = _check("--target", "2xH100-80GB", "--select", "async-grpo-setup",
                          launch=("accelerate", "launch", "--config_file", "fsdp2.yaml", "--num_processes", "2",
                                  SCRIPT, "-", "lora"))
    setup = _result(report, "async-grpo-setup")
    assert code == 0 and setup["status"] == "warn", setup
    assert "2 processes under FSDP" in setup["message"] and "--enable-lora" in setup["message"], setup
    assert setup["details"]["attention"] == "kernels-community/flash-attn3 on NVIDIA H100 80GB HBM3"
    # judged as the launch's environment: an adapter is no NCCL sync, so vllm is first required by the rollout worker
    code, report = _check("--target", "2xH100-80GB", "--target-env", "this", "--select", "async-grpo-setup",
                          launch=("python", SCRIPT, "-", "lora"))
    setup = _result(report, "async-grpo-setup")
    said = " ".join([setup["message"], *setup["details"].get("also", [])])
    assert "vLLM is required to use AsyncRolloutWorker" in said and "WeightTransferClient" not in said, said


@pytest.mark.parametrize("info, status, words", [
    ("healthy", "pass", "is up and serves"),
    ("plain", "fail", "VLLM_SERVER_DEV_MODE=1"),  # a plain `vllm serve`: no dev mode, no /server_info
    ("raw", "warn", "--logprobs-mode raw_logprobs"),
])
def test_the_vllm_serve_asyncgrpo_generates_on_is_probed(info, status, words):
    """vllm-server judges AsyncGRPO's server (always server mode: AsyncGRPOConfig has no use_vllm) as its own client
    asks it (trl/experimental/async_grpo/vllm_client.py: /health, /v1/models, /server_info), on a loopback stand-in
    that answers as vLLM does; the start command is TRL's AsyncGRPO example's."""
    from test_vllm_server import MODEL, Server, server_info, vllm_routes

    routes = vllm_routes(str(MODEL), 4096, {"healthy": server_info({"backend": "nccl"}), "plain": {},
                                            "raw": server_info({"backend": "nccl"}, "raw_logprobs")}[info])
    with Server(routes) as srv:
        code, report = _check("--select", "vllm-server", launch=("python", SCRIPT, "-", "function", srv.url))
        asked = list(srv.asked)
    result = _result(report, "vllm-server")
    assert result["status"] == status and words in result["message"], result
    assert code == (1 if status == "fail" else 0)
    assert "/health" in asked and "/server_info?config_format=json" in asked, asked
    if status != "pass":
        assert "VLLM_SERVER_DEV_MODE=1 vllm serve" in result["message"], result


def test_a_server_max_model_len_below_a_prompt_and_its_completion_fails():
    """TRL's example asks for 1024 new tokens a request (max_completion_length); a `vllm serve` started with a
    --max-model-len that leaves no room for a prompt and 1024 tokens answers those requests with HTTP 400, and
    AsyncGRPO's rollout worker retries each 3 times and then stops (async_rollout_worker.py: `_post` retries
    aiohttp.ClientError, the generation loop re-raises a task's exception)."""
    from test_vllm_server import MODEL, Server, server_info, vllm_routes

    with Server(vllm_routes(str(MODEL), 1024, server_info({"backend": "nccl"}))) as srv:
        code, report = _check("--select", "vllm-server", launch=("python", SCRIPT, "-", "function", srv.url))
    result = _result(report, "vllm-server")
    assert code == 1 and result["status"] == "fail", result
    assert "max_model_len 1024 is below the longest prompt + max_completion_length" in result["message"], result
    assert "retries each 3 times and then stops" in result["message"] and "--max-model-len" in result["message"]
    assert result["details"]["served max_model_len"] == 1024


@pytest.mark.parametrize("variant, lora, status, words", [
    ("lora", None, "warn", "started without `--enable-lora`"),
    ("lora", {"max_lora_rank": 4, "max_loras": 8}, "fail", "Restart it with `--max-lora-rank 8`"),
    ("lora", {"max_lora_rank": 16, "max_loras": 1}, "fail", "`--max-loras 6`"),
    ("lora", {"max_lora_rank": 16, "max_loras": 6}, "pass", "is up and serves"),
    # a DoRA cannot ride as a vLLM adapter: TRL falls back to merged weights before it reads the server's LoRA limits,
    # so a --max-lora-rank below its rank stops nothing (restating TRL's rank check here had failed this healthy job)
    ("lora_dora", {"max_lora_rank": 4, "max_loras": 1}, "warn", "DoRA adapters are not servable by vLLM"),
])
def test_a_lora_meets_the_server_as_trls_own_adapter_sync_decides(variant, lora, status, words):
    """A LoRA (r=8) trained by AsyncGRPOTrainer: its construction asks the server's /server_info and decides the sync
    (trl 1.16 `select_adapter_sync`): a server without --enable-lora means a warning and merged full-weight syncs; a
    --max-lora-rank below the adapter's rank, or fewer --max-loras than max_staleness + 2, a ValueError; an adapter
    vLLM cannot serve (DoRA), a warning and merged syncs whatever the server's limits. vllm-server says what TRL's own
    function, called here on the same answer and a real PeftModel, decides."""
    import warnings

    from test_vllm_server import MODEL, Server, server_info, vllm_routes

    info = dict(server_info({"backend": "nccl"}), lora_config=lora)
    with Server(vllm_routes(str(MODEL), 4096, info)) as srv:
        code, report = _check("--select", "vllm-server", launch=("python", SCRIPT, "-", variant, srv.url))
    result = _result(report, "vllm-server")
    assert result["status"] == status and words in result["message"], result
    assert code == (1 if status == "fail" else 0)
    sync = result["details"]["adapter sync"]
    assert sync.startswith("the adapter alone" if status == "pass" else "merged full weights"), sync
    if variant == "lora" and status != "pass":  # the fix starts the server that takes this adapter (r=8, staleness 4)
        assert result["fix"]["description"].startswith("restart the server as the job needs it"), result["fix"]
        assert ("VLLM_ALLOW_RUNTIME_LORA_UPDATING=1 VLLM_SERVER_DEV_MODE=1 vllm serve" in result["fix"]["description"]
                and "--enable-lora --max-lora-rank 8 --max-loras 6" in result["fix"]["description"]), result["fix"]
    elif status != "pass":  # a DoRA is never an adapter on the server: no LoRA flags to start it with
        assert "--enable-lora" not in result["fix"]["description"], result["fix"]
    assert "select_adapter_sync, trl/experimental/async_grpo/async_grpo_trainer.py:" in sync, sync
    # TRL's own decision on the same /server_info answer
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    from trl.experimental.async_grpo.async_grpo_config import AsyncGRPOConfig
    from trl.experimental.async_grpo.async_grpo_trainer import select_adapter_sync

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(MODEL),
                           LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM",
                                      use_dora=variant == "lora_dora"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        args = AsyncGRPOConfig(output_dir="/tmp/unused", use_cpu=True, bf16=False, report_to="none")
    try:
        trl_says = "pass" if select_adapter_sync(info, model, args) else "warn"
    except ValueError as exc:
        trl_says = "fail"
        assert str(exc).startswith(words.strip("`")) or words in str(exc), exc
    assert trl_says == status


@pytest.mark.slow
def test_the_python_api_checks_a_built_async_grpo_trainer(tmp_path):
    """`trl_doctor.check(trainer)` on an AsyncGRPOTrainer built in this process (TRL's own trainer on the CPU, with a
    rollout worker and a weight transfer of the script's own: fixtures/_async_grpo_runs.py) judges it as the capture
    of a launch does (kind async_grpo, async-grpo-setup), where it raised "not a TRL GRPO, RLOO or PPO trainer"."""
    import sys

    from conftest import FIXTURES

    sys.path.insert(0, str(FIXTURES))
    import _async_grpo_runs

    import trl_doctor

    trainer = _async_grpo_runs.trainer("healthy", str(tmp_path / "out"), steps=1)
    report = trl_doctor.check(trainer, smoke=False)
    assert report.trainer == "async_grpo", report.trainer
    results = {r.rule: r for r in report.results}
    setup = results["async-grpo-setup"]
    assert setup.status.value == "pass", setup
    assert setup.details["rollout worker"] == "the script gives its own rollout_worker", setup.details
    assert not any(k.endswith("(AsyncGRPO's)") for k in setup.details), setup.details  # both parts are the script's
    geometry = results["batch-geometry"]
    assert geometry.status.value == "skip" and "not judged for AsyncGRPOTrainer" in geometry.message, geometry
    assert "not a trainer trl-doctor checks" not in " ".join(r.message for r in report.results)


class _Interrupts:
    def __reduce__(self):
        raise KeyboardInterrupt("pickling this reward interrupts")


class _Exits:
    def __reduce__(self):
        raise SystemExit(4)


def test_a_reward_whose_pickling_raises_a_base_exception_is_pickles_refusal():
    """issue 59: a BaseException from a user object's __reduce__ escaped the pickling probe into the script's
    constructor line ('failed before constructing a TRL trainer', where the trainer was built). It is pickle's refusal
    of that object, as TRL's rollout worker meets it at train()."""
    from trl_doctor.capture.async_grpo import _pickle_error

    assert _pickle_error(_Interrupts()) == "KeyboardInterrupt: pickling this reward interrupts"
    assert _pickle_error(_Exits()) == "SystemExit: 4"
    assert _pickle_error(len) is None
