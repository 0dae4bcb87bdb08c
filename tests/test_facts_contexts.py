"""Every exported fact, asked of each context (issue 47): the full check's, `--static`'s and the watch's. A fact
answers or raises Unavailable with its reason (the rule asking is then `skip`), never another exception: a context
that lacks what a fact needs says so (trl_doctor.interface.FULL_ONLY), and a fact several contexts can answer has
one provider per context.

"Exported": a public function defined in a module of trl_doctor.facts whose first parameter is the context and
whose other parameters have defaults, so it can be asked of a context alone."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

from conftest import FIXTURES

HEALTHY = FIXTURES / "smoke-step" / "ok_grpo_qwen2.yaml"
WATCHED = FIXTURES / "zero-advantage" / "ok_grpo_healthy.json"


def exported_facts() -> list[tuple[str, object]]:
    import trl_doctor.facts as package

    found = []
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        module = importlib.import_module(info.name)
        for name, fn in sorted(vars(module).items()):
            if name.startswith("_") or not inspect.isfunction(fn) or fn.__module__ != module.__name__:
                continue
            params = list(inspect.signature(fn).parameters.values())
            if not params or params[0].name != "ctx":
                continue
            required = [p for p in params[1:] if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
            if not required:
                found.append((f"{module.__name__}.{name}", fn))
    return found


FACTS = exported_facts()


def test_the_facts_layer_exports_the_shared_questions():
    names = {name.rsplit(".", 1)[1] for name, _ in FACTS}
    # the questions issue 47 names, each with a provider per context
    assert {"specials", "embedding_rows", "config_json", "generation_json", "terminator", "dataset_head",
            "config_fields", "geometry_reading", "config_base", "trainer_config_info", "ppo_style",
            "sets_pad_to_eos", "trl_words"} <= names, sorted(names)


@pytest.fixture(scope="module")
def contexts(built_fixtures):
    from trl_doctor.context.config import load_config
    from trl_doctor.context.context import Context
    from trl_doctor.options import Options
    from trl_doctor.static import StaticContext
    from trl_doctor.watch import history
    from trl_doctor.watch.context import WatchContext

    full = Context(load_config(HEALTHY), Options(smoke=False))
    yield {"full": full, "static": StaticContext(load_config(HEALTHY), Options(smoke=False)),
           "watch": WatchContext(history.read(WATCHED), "grpo")}
    full.close()


@pytest.mark.parametrize("kind", ["full", "static", "watch"])
def test_every_fact_answers_or_says_unavailable_in_every_context(contexts, kind):
    from trl_doctor.errors import Unavailable

    ctx = contexts[kind]
    wrong, answered, unavailable = [], [], []
    for name, fn in FACTS:
        try:
            fn(ctx)
        except Unavailable as exc:
            assert str(exc).strip(), f"{name}: Unavailable without a reason"
            unavailable.append(name)
        except Exception as exc:  # noqa: BLE001  (any other exception is the defect this test exists for)
            wrong.append(f"{name}: {type(exc).__name__}: {exc}"[:300])
        else:
            answered.append(name)
    assert not wrong, "\n".join(wrong)
    # the contexts differ where they should: the full check answers the most, the watch the least
    if kind == "full":
        assert len(answered) > len(unavailable), unavailable
    if kind == "static":
        assert {"trl_doctor.facts.inputs.tokens.specials", "trl_doctor.facts.inputs.models.config_json",
                "trl_doctor.facts.trl.geometry.config_base"} <= set(answered), answered
    if kind == "watch":
        assert "trl_doctor.facts.inputs.tokens.specials" in unavailable
