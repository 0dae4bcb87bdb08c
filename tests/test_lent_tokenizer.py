"""The trainer run is lent the context's tokenizer instead of loading it a second time (trl_doctor/facts/trainer_run/lent.py),
and rules that read `ctx.tokenizer` after the run still see the tokenizer as it is on disk."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.trl_pair  # the installed trainer decides what it changes on the tokenizer


def _context(built_fixtures, config: str):
    from trl_doctor import Context, Options
    from trl_doctor.context.config import load_config

    return Context(load_config(built_fixtures / config), Options(device="cpu"))


def test_state_sees_what_a_trainer_changes(built_fixtures):
    from transformers import AutoTokenizer

    from trl_doctor.facts.trainer_run.lent import state

    path = str(built_fixtures / "models" / "gpt2-nopad")
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    before = state(tok)
    tok("a model learns", padding=False)
    assert state(tok) == before  # using it changes nothing
    assert state(tok) == state(AutoTokenizer.from_pretrained(path, local_files_only=True))  # nor does a fresh load
    for change in (lambda t: setattr(t, "pad_token", t.eos_token), lambda t: setattr(t, "padding_side", "left"),
                   lambda t: t.add_tokens(["<extra>"]), lambda t: setattr(t, "chat_template", "{{ x }}"),
                   lambda t: t.add_special_tokens({"pad_token": "[PAD]"})):
        changed = AutoTokenizer.from_pretrained(path, local_files_only=True)
        change(changed)
        assert state(changed) != before


@pytest.mark.slow
def test_a_healthy_run_keeps_the_one_load(built_fixtures, monkeypatch):
    from transformers import AutoTokenizer

    from trl_doctor.facts.trainer_run.plan import trainer_run

    loads = []
    load = AutoTokenizer.from_pretrained.__func__

    def counted(cls, path, *args, **kwargs):  # the real load, counted
        loads.append(str(path))
        return load(cls, path, *args, **kwargs)

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", classmethod(counted))
    with _context(built_fixtures, "smoke-step/ok_grpo_qwen2.yaml") as ctx:
        tok = ctx.tokenizer
        assert len(loads) == 1
        run = trainer_run(ctx)
        assert run.outcome == "ok", run
        assert loads == loads[:1]  # the run was lent the context's tokenizer: it loaded none of its own
        assert ctx.tokenizer is tok  # unchanged by the trainer, so kept


@pytest.mark.slow
def test_a_tokenizer_the_trainer_changed_is_loaded_again(built_fixtures):
    """GPT-2 has no pad token and GRPO (TRL 0.17 on) sets `pad_token = eos_token` on the tokenizer it holds: the
    context must not keep that tokenizer, or a rule after the run would judge a pad token the user's files lack."""
    from trl_doctor.facts.trainer_run.plan import trainer_run

    from importlib.metadata import version

    from packaging.version import Version

    with _context(built_fixtures, "pad-token/bad_gpt2_nopad.yaml") as ctx:
        tok = ctx.tokenizer
        assert tok.pad_token is None
        trainer_run(ctx)
        assert ctx.tokenizer.pad_token is None  # as on disk, whatever the trainer did to the object it was lent
        if Version(version("trl")) >= Version("0.17"):  # GRPOTrainer fills the pad token (0.15 does not)
            assert tok.pad_token is not None
        if tok.pad_token is not None:  # changed by the trainer: the context loaded it again
            assert ctx.tokenizer is not tok


def test_a_scripts_tokenizer_reaches_the_run_as_a_copy_with_what_the_script_set(built_fixtures):
    """A script set Qwen2's model_input_names on a generic tokenizer (fixtures/launch/grpo_rollout_func.py): loaded
    again from disk, the run's tokenizer gave token_type_ids and transformers 4.57's generate refused them, a false
    smoke-step fail on a job that trains (trl 0.27)."""
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from trl_doctor.context.context import Live
    from trl_doctor.facts.trainer_run.lent import lent_tokenizer

    tok = AutoTokenizer.from_pretrained(built_fixtures / "models" / "qwen2-chat")
    tok.model_input_names = ["input_ids", "attention_mask"]
    tok.padding_side = "left"
    tok.chat_template = "{{ messages[0]['content'] }}"
    ctx = SimpleNamespace(live=Live(command="python train.py", script="train.py", where=None, tokenizer=tok))
    with lent_tokenizer(ctx) as lent:
        assert lent is not tok  # the run may change its own: the script's stays as it was
        assert (lent.model_input_names, lent.padding_side, lent.chat_template) == (
            ["input_ids", "attention_mask"], "left", "{{ messages[0]['content'] }}")
        assert "token_type_ids" not in lent("hi")
        lent.add_tokens(["<new>"])
    assert "<new>" not in tok.get_vocab()


def test_a_tokenizer_that_cannot_be_copied_leaves_the_run_to_load_its_own():
    from types import SimpleNamespace

    from trl_doctor.context.context import Live
    from trl_doctor.facts.trainer_run.lent import lent_tokenizer

    class Uncopyable:
        def __deepcopy__(self, memo):
            raise TypeError("a native handle")

    ctx = SimpleNamespace(live=Live(command="python train.py", script="train.py", where=None, tokenizer=Uncopyable()))
    with lent_tokenizer(ctx) as lent:
        assert lent is None
