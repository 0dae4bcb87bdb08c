"""TD018 vllm-server against live servers: a small HTTP server in a thread answers as vLLM's `vllm serve` (what
`trl vllm-serve` runs in TRL 1.11+) or as TRL's own `trl vllm-serve` app (0.16-1.10) does; a listening socket that
never answers stands for a hung server, a closed port for one that is not running."""

from __future__ import annotations

import json
import shutil
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import FIXTURES, check_here, real_trl, result_of, run_doctor, run_json

from trl_doctor.facts.vllm.server import Target, client_endpoints, get, installed_client_endpoints, probe

MODEL = FIXTURES / "models" / "qwen2-chat"
COMPLETION = 64


class Server:
    """A thread serving GET requests from a table {path: (status, json or None, headers)} on `host` (a loopback
    address; tests/test_network.py's private namespace gives it another), counting what it was asked (`asked`)."""

    def __init__(self, routes: dict, host: str = "127.0.0.1"):
        routes = dict(routes)
        asked = self.asked = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                asked.append(self.path)
                status, body, headers = routes.get(self.path.split("?")[0], (404, {"detail": "Not Found"}, {}))
                data = b"" if body is None else json.dumps(body).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://{host}:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def server_info(weight_transfer: dict | None = None, logprobs_mode: str = "processed_logprobs") -> dict:
    """vLLM's `/server_info?config_format=json` (dev mode), the keys TRL 1.11+'s client reads, as `trl vllm-serve`
    starts it (`--weight-transfer-config '{"backend": "nccl"}' --logprobs-mode processed_logprobs`)."""
    return {"model_config": {"logprobs_mode": logprobs_mode, "max_model_len": 4096},
            "parallel_config": {"data_parallel_size": 1}, "lora_config": None,
            "weight_transfer_config": weight_transfer}


def vllm_routes(model: str, max_model_len: int, info: dict | None = None) -> dict:
    """vLLM's OpenAI server: /health answers 200 with no body, /health/ is redirected (FastAPI's slash redirect);
    `/server_info` as `trl vllm-serve` runs it (dev mode, NCCL weight transfer, processed logprobs) unless `info`
    says otherwise ({} for a plain `vllm serve`: no dev mode, no /server_info)."""
    entry = {"id": model, "object": "model", "owned_by": "vllm", "root": model, "parent": None,
             "max_model_len": max_model_len}
    info = server_info({"backend": "nccl"}) if info is None else info
    return {"/health": (200, None, {}), "/health/": (307, None, {"Location": "/health"}),
            "/v1/models": (200, {"object": "list", "data": [entry]}, {}),
            **({"/server_info": (200, info, {})} if info else {})}


TRL_OWN_ROUTES = {"/health/": (200, {"status": "ok"}, {}), "/health": (307, None, {"Location": "/health/"}),
                  "/get_world_size/": (200, {"world_size": 1}, {})}


def write_config(tmp_path: Path, **keys) -> Path:
    shutil.copy(FIXTURES / "vllm-server" / "rewards.py", tmp_path / "rewards.py")
    lines = {"model_name_or_path": str(MODEL), "dataset_path": str(FIXTURES / "data" / "chat.jsonl"),
             "reward_funcs": "[rewards.format_reward]", "num_generations": 2, "per_device_train_batch_size": 2,
             "max_completion_length": COMPLETION, "use_vllm": "true", "vllm_mode": "server", **keys}
    path = tmp_path / "config.yaml"
    path.write_text("".join(f"{k}: {v}\n" for k, v in lines.items()))
    return path


def check(config: Path, *args: str, launch_machine: bool = True) -> tuple[int, dict, float]:
    """The check as it runs on the launch machine (its GPUs faked through NVML), where a local server must answer;
    `launch_machine=False`: on a machine without GPUs, which is not where the server runs."""
    from test_fixture_cases import fake_gpu_env

    env = fake_gpu_env(FIXTURES / "batch-geometry" / "gpus" / "four-a100.json") if launch_machine else None
    start = time.monotonic()
    code, report = run_json("check", str(config), "--select", "vllm-server", "--no-smoke", *args, env=env)
    return code, result_of(report, "TD018"), time.monotonic() - start


def test_no_server_away_from_the_launch_machine_is_a_skip_with_the_start_command(built_fixtures, tmp_path):
    """A CPU runner or a laptop checking a server-mode recipe: the server runs on the launch machine, not here."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    config = write_config(tmp_path, vllm_server_base_url=f"http://127.0.0.1:{port}")
    for args, launch_machine in (((), False), (("--target", "8xH100-80GB"), True)):
        code, result, _ = check(config, *args, launch_machine=launch_machine)
        assert code == 0 and result["status"] == "skip", result
        assert "this is not the launch machine" in result["message"] and "trl vllm-serve" in result["message"]
    code, result, _ = check(config)  # on the launch machine: the job would wait and stop
    assert code == 1 and result["status"] == "fail", result


def needed(result: dict) -> int:
    return int(result["details"]["max-model-len needed"].split()[0])


def test_healthy_vllm_server_with_the_model_and_room_passes(built_fixtures, tmp_path):
    with Server(vllm_routes(str(MODEL), 4096)) as srv:
        code, result, _ = check(write_config(tmp_path, vllm_server_base_url=srv.url))
    assert result["status"] == "pass", result
    assert code == 0
    assert str(MODEL) in result["message"] and "4096" in result["message"]


def test_host_and_port_keys_reach_the_server(built_fixtures, tmp_path):
    with Server(vllm_routes(str(MODEL), 4096)) as srv:
        _, result, _ = check(write_config(tmp_path, vllm_server_host="127.0.0.1", vllm_server_port=srv.port))
    assert result["status"] == "pass", result


def test_server_with_another_model_fails(built_fixtures, tmp_path):
    with Server(vllm_routes("Qwen/Qwen2.5-7B-Instruct", 4096)) as srv:
        code, result, _ = check(write_config(tmp_path, vllm_server_base_url=srv.url))
    assert result["status"] == "fail", result
    assert code == 1
    assert "Qwen/Qwen2.5-7B-Instruct" in result["message"] and "not the trained model" in result["message"]
    assert f"--model {MODEL}" in result["message"]


def test_max_model_len_below_prompt_plus_completion_fails(built_fixtures, tmp_path):
    with Server(vllm_routes(str(MODEL), 50)) as srv:
        code, result, _ = check(write_config(tmp_path, vllm_server_base_url=srv.url))
    assert result["status"] == "fail", result
    need = needed(result)
    assert need > 50 and need == int(result["details"]["max-model-len needed"].split("prompt ")[1].split()[0]) + COMPLETION
    assert "max_model_len 50" in result["message"] and f"--max-model-len {need}" in result["message"]


def test_server_that_never_answers_fails_within_the_timeout(built_fixtures, tmp_path):
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(8)  # the kernel completes the handshake; nobody ever reads or answers
    try:
        port = hung.getsockname()[1]
        _, refused_run, refused_wall = check(write_config(tmp_path, vllm_server_base_url="http://127.0.0.1:9"))
        code, result, wall = check(write_config(tmp_path, vllm_server_base_url=f"http://127.0.0.1:{port}"))
    finally:
        hung.close()
    assert result["status"] == "fail", result
    assert "no answer within 2 s" in result["message"]
    probe_s = float(result["details"]["probe"].split()[0])
    assert probe_s < 3.0, result["details"]
    assert wall - refused_wall < 5.0, (wall, refused_wall)  # the hung server costs the probe's timeout, no more


def test_refused_fails_with_the_start_command(built_fixtures, tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    code, result, _ = check(write_config(tmp_path, vllm_server_base_url=f"http://127.0.0.1:{port}",
                                         vllm_tensor_parallel_size=2))
    assert result["status"] == "fail", result
    assert code == 1
    msg = result["message"]
    need = needed(result)
    assert "refused" in msg
    assert (f"CUDA_VISIBLE_DEVICES=<spare GPUs> trl vllm-serve --model {MODEL} --tensor-parallel-size 2 "
            f"--max-model-len {need} --port {port}") in msg
    import dataclasses

    from trl import GRPOConfig

    has_mode = "vllm_mode" in {f.name for f in dataclasses.fields(GRPOConfig)}
    assert ("vllm_mode: colocate" in msg) == has_mode  # offered only where the installed TRL has vllm_mode (>= 0.18)
    assert "vllm_server_timeout" in msg or not has_mode


def test_trls_own_server_is_judged_by_what_the_installed_client_needs(built_fixtures, tmp_path):
    with Server(TRL_OWN_ROUTES) as srv:
        _, result, _ = check(write_config(tmp_path, vllm_server_base_url=srv.url))
    if installed_client_endpoints().reads_models:  # TRL 1.11+: the client reads /v1/models at start-up
        assert result["status"] == "fail", result
        assert "/v1/models" in result["message"]
    else:  # TRL 0.16-1.10: its own server reports no model, no length
        assert result["status"] == "pass", result
        assert result["details"]["world size"] == 1


def test_unhealthy_answer_fails(built_fixtures, tmp_path):
    with Server({"/health": (500, {"detail": "engine dead"}, {}), "/health/": (500, None, {})}) as srv:
        _, result, _ = check(write_config(tmp_path, vllm_server_base_url=srv.url))
    assert result["status"] == "fail", result
    assert "HTTP 500" in result["message"]


# -- the probe and the client reader on their own (no doctor run) ------------------------------------------


def test_probe_follows_the_slash_redirect_both_ways():
    for routes, first in ((vllm_routes("m", 10), "/health/"), (TRL_OWN_ROUTES, "/health")):
        with Server(routes) as srv:
            got = probe(Target(srv.url, "127.0.0.1", srv.port, "http", "", "test"),
                        client_endpoints(f'url = f"{{self.base_url}}{first}"\n', "x.py"))
        assert got.health.status == 200


def test_client_endpoints_per_release():
    old = 'url = f"{self.base_url}/health/"\nself.session.post(f"{self.base_url}/generate/", json=payload)\n'
    new = 'self.model = self._get(f"{self.base_url}/v1/models")\nurl = f"{self.base_url}/health"\n'
    e_old, e_new = client_endpoints(old, "old.py"), client_endpoints(new, "new.py")
    assert (e_old.health, e_old.reads_models, e_old.posts_generate) == ("/health/", False, True)
    assert (e_new.health, e_new.reads_models, e_new.posts_generate) == ("/health", True, False)


def test_get_times_out_on_a_silent_server():
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(1)
    try:
        start = time.monotonic()
        got = get(Target("", "127.0.0.1", hung.getsockname()[1], "http", "", "test"), "/health", timeout=0.5)
        assert got.kind == "timeout" and time.monotonic() - start < 1.5
    finally:
        hung.close()


def test_probe_reads_a_plain_vllm_server_for_an_old_client():
    """A 0.16-1.10 client (posts /generate/) probing vLLM's own server: its /v1/models entry is read, and the client
    reader says the client needs /generate/, which the rule reports as a failure."""
    with Server(vllm_routes("Qwen/Qwen2.5-0.5B", 32768)) as srv:
        got = probe(Target(srv.url, "127.0.0.1", srv.port, "http", "", "test"),
                    client_endpoints('f"{self.base_url}/health/"\nf"{self.base_url}/generate/"\n', "old.py"))
    assert got.health_path == "/health/" and got.health.status == 200  # through the slash redirect
    assert got.served and got.served[0]["max_model_len"] == 32768


# -- TRL 1.10, the last release whose `trl vllm-serve` is TRL's own app (health /health/, posts /generate/) ---------


@pytest.mark.slow
@pytest.mark.other_trl  # another TRL release from PyPI (real_trl)
def test_trl_1_10_client_against_its_own_server_and_against_vllms(built_fixtures, tmp_path):
    env = real_trl("1.10.0")
    config = write_config(tmp_path)
    for routes, status, words in ((TRL_OWN_ROUTES, "pass", "does not report its model"),
                                  (vllm_routes(str(MODEL), 4096), "fail", "posts /generate/")):
        with Server(routes) as srv:
            config.write_text(config.read_text().split("vllm_server_base_url")[0] + f"vllm_server_base_url: {srv.url}\n")
            proc = run_doctor("check", str(config), "--select", "vllm-server", "--no-smoke", "--format", "json", env=env)
        result = result_of(json.loads(proc.stdout), "TD018")
        assert result["status"] == status and words in result["message"], result
        assert result["details"]["health"].startswith("GET /health/:"), result["details"]


@pytest.mark.pinned_releases
def test_trl_016_017_run_vllm_as_a_server_in_every_rule(built_fixtures, tmp_path):
    """trl 0.16-0.17 keep `vllm_device` as a deprecated field beside the server client (`vllm_server_host`), and run
    vLLM as a server (`trl vllm-serve`). Issue 30 (class 5): vllm-server said 0.17 ran vLLM "in-process on a spare
    GPU" while version-skew said server mode; every rule now reads one placement
    (facts.launch.settings.vllm_placement)."""
    from importlib.metadata import version as installed

    from packaging.version import Version

    if not Version("0.16") <= Version(installed("trl")) < Version("0.18"):
        pytest.skip(f"trl {installed('trl')}: the case is trl 0.16-0.17 (the trl017 lane)")
    config = tmp_path / "config.yaml"
    config.write_text((FIXTURES / "vllm-server" / "bad_not_running.yaml").read_text()
                      .replace("../models/", f"{FIXTURES}/models/").replace("../data/", f"{FIXTURES}/data/")
                      .replace("vllm_mode: server\n", "").replace("vllm_server_base_url: http://127.0.0.1:9",
                                                                  "vllm_server_host: 127.0.0.1\nvllm_server_port: 9"))
    shutil.copy(FIXTURES / "vllm-server" / "rewards.py", tmp_path / "rewards.py")
    code, report = check_here(str(config), "--select", "vllm-server", "--no-smoke")
    server = result_of(report, "vllm-server")
    assert "in-process" not in json.dumps(server), server
    assert server["details"]["vLLM mode"] == f"server (trl {installed('trl')} has no vllm_mode: server mode only)", server
    code, report = check_here(str(config), "--select", "gpu-capacity", "--no-smoke", "--target", "2xA100-80GB")
    capacity = result_of(report, "gpu-capacity")
    assert capacity["details"]["vLLM"] == "server mode: `trl vllm-serve` on this machine", capacity["details"]


# -- issue 46: TRL 1.11+ asks /server_info (trl/generation/vllm_client.py: get_server_info, init_communicator;
# trl/trainer/grpo_trainer.py: the logprobs mode under importance sampling)

needs_server_info = pytest.mark.skipif(not installed_client_endpoints().reads_server_info,
                                       reason="the installed TRL's client asks no /server_info (trl < 1.11)")


@needs_server_info
@pytest.mark.parametrize("info, status, words", [
    ({}, "fail", "VLLM_SERVER_DEV_MODE=1"),  # a plain `vllm serve`: no dev mode, /server_info is a 404
    (server_info(None), "fail", "no weight-transfer engine"),
    (server_info({"backend": "nccl"}, "raw_logprobs"), "warn", "--logprobs-mode raw_logprobs"),
])
def test_what_trls_client_reads_from_server_info_is_judged(built_fixtures, tmp_path, info, status, words):
    """Each of these servers answers /health and serves the model with room (the healthy test's server), and the job
    stops at start (the first two: TRL's RuntimeError) or trains with a biased importance-sampling correction."""
    with Server(vllm_routes(str(MODEL), 4096, info)) as srv:
        code, result, _ = check(write_config(tmp_path, vllm_server_base_url=srv.url))
        asked = list(srv.asked)
    assert result["status"] == status and words in result["message"], result
    assert code == (1 if status == "fail" else 0)
    assert "/server_info?config_format=json" in asked, asked


@needs_server_info
def test_raw_logprobs_pass_where_importance_sampling_is_off(built_fixtures, tmp_path):
    with Server(vllm_routes(str(MODEL), 4096, server_info({"backend": "nccl"}, "raw_logprobs"))) as srv:
        code, result, _ = check(write_config(tmp_path, vllm_server_base_url=srv.url,
                                             vllm_importance_sampling_correction="false"))
    assert code == 0 and result["status"] == "pass", result
