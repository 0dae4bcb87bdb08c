"""Helpers for TD018 vllm-server: where the trainer looks for its vLLM server, what the installed TRL's client asks
it for, and a short-timeout probe of that server (standard library only).

Endpoints, read from TRL's sources (`trl/scripts/vllm_serve.py`, `trl/extras/vllm_client.py` up to 0.x,
`trl/generation/vllm_client.py` in 1.x):
- TRL 0.16-1.10: `trl vllm-serve` is TRL's own FastAPI app. `GET /health/` answers `{"status": "ok"}`;
  `GET /get_tensor_parallel_size/` (0.16-0.17) or `GET /get_world_size/` (0.18-1.10) the engine's size;
  generation is `POST /generate/` (and `/chat/`). No endpoint reports the served model or its max_model_len.
- TRL 1.11 and later: `trl vllm-serve` runs vLLM's own `vllm serve` (with VLLM_SERVER_DEV_MODE=1). The client
  checks `GET /health` (200, empty body) and reads `GET /v1/models`, whose entries carry `id` (the served name,
  the model path by default), `root` (the model path) and `max_model_len`. It then asks `GET /server_info`
  (vLLM's resolved config, served in dev mode only: a 404 stops the trainer) for `weight_transfer_config` (None:
  no weight sync, RuntimeError at start) and, with importance sampling on, `model_config.logprobs_mode`.
"""

from __future__ import annotations

import json
import re
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from trl_doctor.facts.launch.settings import config_value

REQUEST_TIMEOUT = 2.0  # seconds per request
CLIENT_MODULES = ("generation/vllm_client.py", "extras/vllm_client.py")


@dataclass(frozen=True)
class Target:
    """Where the trainer connects: the base URL, and how it was configured."""

    base_url: str
    host: str
    port: int
    scheme: str
    path: str  # the base URL's path ("" usually)
    source: str  # "vllm_server_base_url" or "vllm_server_host/vllm_server_port"


def server_target(ctx) -> Target:
    """The server the trainer's VLLMClient would connect to, as the installed TRL builds its URL."""
    url = config_value(ctx, "vllm_server_base_url", None)
    if url:
        parsed = urlparse(str(url))
        scheme = parsed.scheme or "http"
        host = parsed.hostname or ""
        port = parsed.port or (443 if scheme == "https" else 80)
        return Target(str(url).rstrip("/"), host, port, scheme, parsed.path.rstrip("/"), "vllm_server_base_url")
    host = str(config_value(ctx, "vllm_server_host", "0.0.0.0") or "0.0.0.0")
    port = int(config_value(ctx, "vllm_server_port", 8000) or 8000)
    return Target(f"http://{host}:{port}", host, port, "http", "", "vllm_server_host/vllm_server_port")


@dataclass(frozen=True)
class Reach:
    """Whether the check may contact the server: it is this machine, or the user allowed its host."""

    here: bool  # the host is this machine (loopback, wildcard, its own address or name: no look-up)
    allowed: str | None  # the --allow-host / allow-hosts entry naming it, when it is another machine

    @property
    def may_probe(self) -> bool:
        return self.here or self.allowed is not None


def reach(ctx, target: Target) -> Reach:
    """May the check contact `target`? Only this machine, unless --allow-host (or allow-hosts) names the host."""
    from trl_doctor.runtime.network import allowed_entry, parse_hosts, this_machine

    if this_machine(target.host):
        return Reach(True, None)
    entry = allowed_entry(parse_hosts(getattr(ctx.options, "allow_hosts", ()) or ()), target.host, target.port)
    return Reach(False, str(entry) if entry is not None else None)


def allow_words(target: Target) -> str:
    """How to ask for the probe of another machine's server."""
    from trl_doctor.runtime.network import ALLOW_OPTION, HostPort

    hp = HostPort(target.host.strip("[]").lower(), target.port)
    return f"to probe it from here, pass {ALLOW_OPTION} {hp} (or list it in the project's allow-hosts)"


@dataclass(frozen=True)
class ClientEndpoints:
    """What the installed TRL's VLLMClient asks of the server."""

    health: str  # "/health/" (TRL's own server) or "/health" (vLLM's)
    reads_models: bool  # it reads /v1/models at start-up (1.11+): a server without it stops the trainer
    posts_generate: bool  # it posts /generate/ (TRL's own server, 0.16-1.10): vLLM's server has no such route
    where: str  # the file it was read from
    reads_server_info: bool = False  # it asks /server_info (1.11+: the weight-transfer engine, the logprobs mode)


def client_endpoints(text: str | None, rel: str = "") -> ClientEndpoints:
    """Read from the client's source text; TRL 1.x's vLLM-server client when there is none."""
    if not text:
        return ClientEndpoints("/health", True, False, "no TRL client found: vLLM's endpoints assumed")
    m = re.search(r"/health/?(?=[\"'])", text)
    health = m.group(0) if m else "/health/"
    return ClientEndpoints(health, "/v1/models" in text, bool(re.search(r"/generate/[\"']", text)), rel,
                           "/server_info" in text)


def installed_client_endpoints(trainer: str = "grpo") -> ClientEndpoints:
    """What the installed TRL's client for `trainer` asks the server: GRPO and RLOO share TRL's VLLMClient; AsyncGRPO
    has its own (trl/experimental/async_grpo/vllm_client.py)."""
    from trl_doctor.facts.trl.installed import trl_root

    if trainer == "async_grpo":
        from trl_doctor.facts.trl.async_grpo import client_text

        found = client_text()
        return client_endpoints(found[1], found[0]) if found else client_endpoints(None)

    root = trl_root()
    for rel in CLIENT_MODULES:
        path = root / rel if root is not None else None
        if path is not None and path.is_file():
            return client_endpoints(path.read_text(encoding="utf-8"), f"trl/{rel}")
    return client_endpoints(None)


@dataclass(frozen=True)
class Client:
    """The trainer's vLLM client as the installed TRL writes it: what it asks the server and how it stops. GRPO and
    RLOO share TRL's VLLMClient; AsyncGRPOTrainer has its own (facts/trl/async_grpo.py holds its words)."""

    endpoints: ClientEndpoints
    always_server: str | None  # why the trainer always generates on a server (AsyncGRPO), or None: its vllm_mode says
    unreached: str  # how it stops when no server answers
    no_server_info: str  # what a server without /server_info (no dev mode) does to it, `{where}` its client's file
    too_long: str | None  # how it meets a request longer than the server's max_model_len (None: vLLM's own words)
    serve: str  # the start command after `CUDA_VISIBLE_DEVICES=<spare GPUs> `, `{model}` and `{tp}` to fill
    logprobs: str  # what a --logprobs-mode other than processed_logprobs does to it
    logprobs_always: bool  # it takes the server's log-probabilities whatever its config (else: importance sampling on)
    adapter_sync: bool  # its construction decides a LoRA's sync from /server_info (TRL's select_adapter_sync)


_VLLM_CLIENT: dict[str, Any] = dict(
    always_server=None,
    unreached="ConnectionError: The vLLM server can't be reached",
    no_server_info=("has no /server_info, which the installed TRL's client ({where}) asks before the first weight "
                    "sync: TRL raises \"RuntimeError: The vLLM server ... does not expose its development endpoints "
                    "... Restart it with `VLLM_SERVER_DEV_MODE=1` in its environment\" (a plain `vllm serve`; `trl "
                    "vllm-serve` sets it)"),
    too_long=None,
    serve="trl vllm-serve --model {model} --tensor-parallel-size {tp}",
    logprobs=("TRL only warns (\"which biases the importance sampling correction\") and the job trains with the bias; "
              "restart it with --logprobs-mode processed_logprobs (`trl vllm-serve` passes it), or set "
              "vllm_importance_sampling_correction: false"),
    logprobs_always=False,
    adapter_sync=False,
)


def client(trainer: str = "grpo") -> Client:
    """The client profile of `trainer` ("grpo", "rloo", "async_grpo") in the installed TRL."""
    endpoints = installed_client_endpoints(trainer)
    if trainer != "async_grpo":
        return Client(endpoints, **_VLLM_CLIENT)
    from trl_doctor.facts.trl import async_grpo

    return Client(endpoints, async_grpo.ALWAYS_SERVER, async_grpo.UNREACHED, async_grpo.NO_SERVER_INFO,
                  async_grpo.TOO_LONG, async_grpo.SERVE, async_grpo.LOGPROBS, True, True)


@dataclass
class Answer:
    """One request's outcome: status (None when no HTTP answer), parsed JSON (or None) and the error in words."""

    status: int | None
    data: object = None
    error: str | None = None  # "refused", "timed out", "unreachable: ...", ...
    kind: str | None = None  # "refused" / "timeout" / "dns" / "unreachable" when status is None


def get(target: Target, path: str, timeout: float = REQUEST_TIMEOUT, _redirects: int = 2) -> Answer:
    """GET `path` on the server with one socket timeout (connect and read); follows FastAPI's slash redirects."""
    import http.client  # here, not at the top: every listing of the rules (and --static) imports this module

    from trl_doctor.runtime.network import RefusedConnection, RefusedLookup

    host = "127.0.0.1" if target.host in ("0.0.0.0", "") else ("::1" if target.host == "::" else target.host)
    cls = http.client.HTTPSConnection if target.scheme == "https" else http.client.HTTPConnection
    conn = cls(host, target.port, timeout=timeout)
    deadline = time.monotonic() + timeout
    try:
        conn.request("GET", target.path + path, headers={"Accept": "application/json"})
        conn.sock.settimeout(max(0.05, deadline - time.monotonic()))
        resp = conn.getresponse()
        body = resp.read(4 * 2**20)
        if resp.status in (301, 302, 307, 308) and _redirects:
            loc = urlparse(resp.getheader("Location") or "")
            if loc.path and loc.path != target.path + path:
                return get(target, loc.path[len(target.path):], timeout, _redirects - 1)
        try:
            data = json.loads(body) if body else None
        except ValueError:
            data = None
        return Answer(resp.status, data)
    except (RefusedLookup, RefusedConnection) as exc:  # the worker's guard: another machine nobody allowed
        return Answer(None, error=str(exc.strerror or exc), kind="not allowed")
    except ConnectionRefusedError:
        return Answer(None, error="connection refused (nothing listens on that port)", kind="refused")
    except (socket.timeout, TimeoutError):
        return Answer(None, error=f"no answer within {timeout:g} s", kind="timeout")
    except socket.gaierror as exc:
        return Answer(None, error=f"the host name does not resolve here ({exc.strerror or exc})", kind="dns")
    except OSError as exc:
        return Answer(None, error=f"{type(exc).__name__}: {exc.strerror or exc}", kind="unreachable")
    except http.client.HTTPException as exc:
        return Answer(None, error=f"not an HTTP answer ({type(exc).__name__})", kind="unreachable")
    finally:
        conn.close()


@dataclass
class Probe:
    """What the server answered."""

    health: Answer
    health_path: str
    models: Answer | None = None
    world_size: int | None = None
    served: list[dict] = field(default_factory=list)  # /v1/models entries: id, root, max_model_len
    server_info: Answer | None = None  # GET /server_info?config_format=json, where the installed client asks it
    elapsed: float = 0.0


def probe(target: Target, endpoints: ClientEndpoints, timeout: float = REQUEST_TIMEOUT) -> Probe:
    """Health first (the installed client's path, then the other spelling on a 404); then what it serves."""
    start = time.monotonic()
    paths = [endpoints.health] + [p for p in ("/health/", "/health") if p != endpoints.health]
    health, used = None, paths[0]
    for path in paths:
        health, used = get(target, path, timeout), path
        if health.status != 404:
            break
    assert health is not None  # paths is never empty
    out = Probe(health, used)
    if health.status is None or health.status >= 400:
        out.elapsed = time.monotonic() - start
        return out
    out.models = get(target, "/v1/models", timeout)
    data = out.models.data
    if out.models.status == 200 and isinstance(data, dict) and isinstance(data.get("data"), list):
        out.served = [e for e in data["data"] if isinstance(e, dict)]
    if out.served and endpoints.reads_server_info:
        out.server_info = get(target, "/server_info?config_format=json", timeout)
    if not out.served and out.models.status is not None:
        for path in ("/get_world_size/", "/get_tensor_parallel_size/"):
            got = get(target, path, timeout)
            if got.status == 200 and isinstance(got.data, dict):
                value = got.data.get("world_size", got.data.get("tensor_parallel_size"))
                out.world_size = value if isinstance(value, int) else None
                break
            if got.status is None:
                break
    out.elapsed = time.monotonic() - start
    return out


def model_names(ref: str) -> set[str]:
    """The names a model reference can be compared by: as written, resolved, and a hub cache snapshot's repo id."""
    names = {ref.rstrip("/")}
    m = re.search(r"models--([^/]+)--([^/]+)", ref)
    if m:
        names.add(f"{m.group(1)}/{m.group(2)}")
    try:
        p = Path(ref).expanduser()
        if p.exists():
            names.add(str(p.resolve()))
    except (OSError, ValueError):
        pass
    return names


def same_model(trained: set[str], served: str) -> str | None:
    """"same" when a name matches, "same name" when only the last path component does, None otherwise."""
    if trained & model_names(served):
        return "same"
    last = served.rstrip("/").rsplit("/", 1)[-1]
    if any(t.rstrip("/").rsplit("/", 1)[-1] == last for t in trained):
        return "same name"
    return None
