"""TD007 version-skew: installed packages fit each other's declared ranges; no known breakage applies.

What it does
    Reads versions and `Requires-Dist` from the installed metadata (nothing imported) and checks
    every requirement one of TRL, transformers, accelerate, torch, vLLM, PEFT, DeepSpeed, datasets
    declares on another (markers for this interpreter; 2.13.0+cpu satisfies torch==2.13.0; an extra
    such as `trl[vllm]` counts once vllm is installed); then each matching entry of
    trl_doctor/data/known_issues.yaml (one another rule's probe decides is only explained).
    Liger (A9): liger-kernel on the launch machine (fail), within TRL's `liger` extra (else warn);
    an MoE policy whose load-balancing loss the Liger loss drops (trl 1.9-1.13, its source): warn.

Why is this bad?
    pip enforces requirements only at install and only warns when a later install
    (`pip install vllm==X`, `--no-deps`, conda, a pre-built image) breaks them; an extra's range
    only when asked for. The job then fails far from the cause: an AttributeError in TRL's weight
    sync to vLLM, an ImportError at the trainer import, or silently wrong memory or loss. Known
    breakages sit inside allowed ranges: transformers >= 5.3 cannot import GRPOTrainer of trl
    0.14-0.28; trl 1.13 removed PPO; trl 0.15-0.17 pass `logits_to_keep`, which transformers < 4.49
    swallows; stop ids reach vLLM only from trl 0.19; `use_vllm` is an external `trl vllm-serve` in
    trl 0.16-0.29, colocated from 1.0.

Example
    reward_model_path: rm-qwen2         # a PPO config, with trl 1.16.0 installed
    -> fail: KI008 trl 1.13 and later have no PPOTrainer (...): "ImportError: cannot import name
       'PPOTrainer' from 'trl'" (and trl.experimental.ppo does not exist); no PPO job can start.

Fix safety
    No automatic fix: each finding names the range and who declares it, with a manual fix (the pin
    or upgrade, e.g. `pip install "vllm>=0.22.0,<=0.31.0"`, or `pip install "trl==1.12.0"` for PPO).
"""

from __future__ import annotations

from typing import Any

from trl_doctor.facts.trl.behaviour import ppo_v1
from trl_doctor import ASYNC_GRPO, fail, manual, passed, rule, TRAINERS, warn
from trl_doctor.facts.launch.launcher import launch
from trl_doctor.facts.trl.versions import (  # the pure core, testable with injected versions
    WATCHED,
    installed_requirements,
    known_issue_findings,
    load_table,
    normalize,
    requirement_findings,
    table_packages,
)


def config_facts(ctx) -> dict[str, Any]:
    """What the table's config conditions look at: the trainer and the config's own keys."""
    facts = dict(ctx.config.raw)
    facts["trainer"] = ctx.trainer
    facts["ppo_first_api"] = ppo_v1(ctx)  # a job built on trl < 0.12's own PPOTrainer uses the API it has
    return facts


def _liger(ctx, requires: dict):
    """Liger kernels asked for (docs/coverage.md: A9): liger-kernel must be installed on the launch machine, within the range
    the installed TRL's `liger` extra declares. The extra is named after no package, so the requirement scan above
    never applies it."""
    from trl_doctor.facts.launch.launcher import package_version
    from trl_doctor.facts.launch.settings import config_value
    from trl_doctor.facts.trl.versions import LIGER_KEYS, extra_requirement, version_in

    asked = []
    for key in LIGER_KEYS:
        try:
            if config_value(ctx, key, False) is True:
                asked.append(key)
        except Exception:  # a value TRL's parser refuses: trainer-config reports it
            continue
    if not asked:
        return
    trl_version = ctx.version("trl")
    wanted = extra_requirement(requires.get("trl", []), "liger", "liger-kernel")
    have = package_version("liger-kernel")
    keys = " and ".join(f"{k}: true" for k in asked)
    details = {"liger": f"{keys}; liger-kernel {have or 'not installed'}; trl {trl_version}[liger] declares "
                        f"liger-kernel{wanted or ' (no range)'}"}
    pin = f'pip install "liger-kernel{wanted}"' if wanted else "pip install liger-kernel"
    if have is None:
        if not launch(ctx).software_here:  # what the launch machine has installed is judged there, never from here
            yield passed(f"{keys}; liger-kernel is not installed here ({launch(ctx).not_judged}): it must be installed "
                         f"there ({pin})", **details)
            return
        said = " or ".join(w for k, w in (
            ("use_liger_kernel", "\"You have set `use_liger_kernel` to `True` but liger-kernel ... is not available\""),
            ("use_liger_loss", "\"Liger is required to use `liger_loss` as the GRPO loss\"")) if k in asked)
        yield fail(f"{keys} but liger-kernel is not installed: the trainer stops before the first step ({said}); "
                   f"{pin} (the range trl {trl_version}[liger] declares), or drop {' and '.join(asked)}",
                   manual(pin), **details)
        return
    if wanted and not version_in(have, wanted):
        yield warn(f"{keys} with liger-kernel {have}, outside liger-kernel{wanted} that trl {trl_version} declares for "
                   f"its liger extra: the kernels TRL calls may be missing or take other arguments; {pin}",
                   manual(pin), **details)
        return
    yield passed(f"{keys}: liger-kernel {have} fits trl {trl_version}[liger]'s liger-kernel{wanted or ' (no range)'}",
                 **details)


def _liger_moe(ctx):
    """Liger kernels on a Mixture-of-Experts policy (docs/coverage.md: A9): where the installed TRL's Liger loss adds no
    load-balancing loss while its own loss adds one (trl 1.9-1.13, read from its source), the router trains without
    the auxiliary loss router_aux_loss_coef asks for, and nothing says so (trl#7009)."""
    from trl_doctor.facts.inputs.models import text_config_json
    from trl_doctor.facts.launch.settings import config_value
    from trl_doctor.facts.trl.installed import liger_loss_without_aux_loss

    try:
        if config_value(ctx, "use_liger_kernel", False) is not True:
            return
        coef = config_value(ctx, "router_aux_loss_coef", None)
    except Exception:  # a value TRL's parser refuses: trainer-config reports it
        return
    where = liger_loss_without_aux_loss(ctx.trainer)
    model = text_config_json(ctx)
    if where is None or not coef or model.get("output_router_logits") is None:  # TRL's own test of an MoE model
        return
    trl_version = ctx.version("trl")
    pin = 'pip install "trl>=1.14"'
    yield warn(f"use_liger_kernel: true on a Mixture-of-Experts policy ({model.get('model_type')}): trl {trl_version} "
               f"computes the loss with Liger's fused GRPO loss ({where}: compute_loss calls compute_liger_loss), which "
               f"adds no load-balancing loss: the router trains without the auxiliary loss router_aux_loss_coef "
               f"({coef}) asks for, and nothing says so (trl#7009; trl 1.14 adds it); {pin}, or use_liger_kernel: false",
               manual(f"{pin}, or set use_liger_kernel: false"),
               liger=f"Liger loss: {where}; router_aux_loss_coef {coef}; the model's config has output_router_logits")


@rule(
    id="TD007",
    slug="version-skew",
    title="Installed versions fit each other's declared ranges and no known breakage applies",
    trainers=(*TRAINERS, ASYNC_GRPO),
    static_skip="it judges the installed training stack",
)
def check(ctx):
    table = load_table()
    names = list(WATCHED) + [p for p in table_packages(table) if normalize(p) not in WATCHED]
    installed, requires = installed_requirements(names)
    violations, checked = requirement_findings(installed, requires)
    issues = known_issue_findings(installed, config_facts(ctx), table)

    present = {name: v for name, v in installed.items() if name in WATCHED and v is not None}
    common: dict[str, Any] = {
        "installed": present,
        "not installed": [n for n in WATCHED if installed.get(n) is None],
        "requirements checked": checked,
    }
    explained = [f for f in issues if f.status == "info"]
    if explained:
        common["known issues decided by other rules"] = [
            f"{f.details['known issue']} {f.details['title']} ({f.details['versions']}): decided by "
            f"{f.details['decided by']}; fix if it fails there: {f.fix}"
            for f in explained
        ]
    found = False
    for finding in [*_liger(ctx, requires), *_liger_moe(ctx)]:
        if finding.status.value == "pass":  # a note beside the main message, which stays the ranges' summary
            common["liger-kernel"] = finding.message
            continue
        found = True
        yield finding
    for f in violations + [i for i in issues if i.status != "info"]:
        found = True
        details = {**f.details, **common}
        yield (fail if f.status == "fail" else warn)(f.message, manual(f.fix) if f.fix else None, **details)
    if found:
        return
    listed = ", ".join(f"{k} {v}" for k, v in present.items())
    message = f"{listed} fit the {checked} ranges they declare on each other; "
    if explained:
        named = "; ".join(f"{f.details['known issue']} ({f.details['title']}) is decided by the "
                          f"{f.details['decided by']} rule" for f in explained)
        message += f"known issues that match this {ctx.trainer} config are left to the rules that run the installed code: {named}"
    else:
        message += f"no known issue applies to this {ctx.trainer} config"
    yield passed(message, **common)
