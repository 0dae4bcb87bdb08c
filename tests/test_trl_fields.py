"""trl_doctor/data/trl_fields.json (what `check --static` knows of each TRL release, generated from the released
wheels by tools/gen_trl_fields.py) against the TRL installed here: every CI lane has another release (0.15.2,
0.17.0, 1.16.0), so each lane checks its own release's entry, field by field, and the geometry statements against
the installed source the full check reads."""

from __future__ import annotations

import dataclasses
from importlib.metadata import version

import pytest
import yaml

from conftest import FIXTURES

pytestmark = pytest.mark.pinned_releases  # the trl017 lane runs it too: every lane judges its own release

INSTALLED = version("trl")


def _entry() -> dict:
    from trl_doctor.facts.trl import fields

    assert INSTALLED in fields.data()["releases"], f"trl {INSTALLED} is not in trl_fields.json: rerun tools/gen_trl_fields.py"
    return fields.release(INSTALLED)


def _trl_declared(cls) -> set[str]:
    """The fields TRL's own classes declare (TrainingArguments' come from transformers)."""
    return {name for klass in cls.__mro__ if klass.__module__.startswith("trl")
            for name in vars(klass).get("__annotations__", {}) if name in cls.__dataclass_fields__}


def _live_classes() -> dict:
    import trl

    from trl_doctor.facts.trl.installed import config_class

    out = {name: config_class(trainer) for trainer, name in (("grpo", "GRPOConfig"), ("rloo", "RLOOConfig"),
                                                             ("ppo", "PPOConfig"))}
    for name in ("ScriptArguments", "ModelConfig", "DatasetMixtureConfig"):
        out[name] = getattr(trl, name, None)
    return out


def test_the_config_classes_match_the_installed_trl():
    entry = _entry()
    for name, cls in _live_classes().items():
        if cls is None or not dataclasses.is_dataclass(cls):
            assert name not in entry["configs"] or name in ("ScriptArguments", "DatasetMixtureConfig"), name
            continue
        assert name in entry["configs"], f"{name} of trl {INSTALLED} is missing from the data"
        data = entry["configs"][name]["fields"]
        assert set(data) == _trl_declared(cls), (name, set(data) ^ _trl_declared(cls))
        live = {f.name: f for f in dataclasses.fields(cls)}
        for key, field in data.items():
            if "default" in field and live[key].default is not dataclasses.MISSING:
                value = live[key].default
                assert field["default"] == getattr(value, "value", value), (name, key, field, value)
            assert ("required" in field) == (live[key].default is dataclasses.MISSING and
                                             live[key].default_factory is dataclasses.MISSING), (name, key)


def test_training_arguments_are_read_as_dataclasses_sees_them():
    from transformers import TrainingArguments

    from trl_doctor.facts.trl import fields

    read, where = fields.training_arguments()
    assert "(installed)" in where
    assert set(read) == {f.name for f in dataclasses.fields(TrainingArguments)}


def test_pad_to_eos_is_what_the_full_check_reads_from_the_installed_trainer():
    from trl_doctor.facts.trl.installed import trainer_sets_pad_to_eos, trainer_source

    entry = _entry()
    for trainer in ("grpo", "rloo", "ppo"):
        if trainer_source(trainer) is None:
            continue
        assert bool(entry["sets_pad_to_eos"].get(trainer)) == bool(trainer_sets_pad_to_eos(trainer)[0]), trainer


@pytest.mark.parametrize("procs", [1, 4])
def test_the_geometry_statements_give_the_full_checks_verdicts(built_fixtures, procs):
    """Every batch-geometry case, evaluated on the stored statements and defaults (static) and on the installed
    TRL's source and config class (the full check's reading): the same violations, word for word."""
    from trl_doctor.context.config import load_config
    from trl_doctor.facts.trl.installed import config_class
    from trl_doctor.facts.trl.geometry import Evaluator, config_values, installed_reading, stored_reading, values_over
    from trl_doctor.facts.trl import fields

    spec = yaml.safe_load((FIXTURES / "batch-geometry" / "expected.yaml").read_text())
    compared = 0
    for case in spec["cases"]:
        cfg = load_config(FIXTURES / "batch-geometry" / case)
        cls = config_class(cfg.trainer)
        if cls is None:
            continue
        full, _ = Evaluator(installed_reading(cfg.trainer, cls), procs).run(config_values(cls, cfg.raw))
        own, _ = fields.config_fields(INSTALLED, cfg.trainer)
        static, _ = Evaluator(stored_reading(fields.release(INSTALLED)["geometry"][cfg.trainer]), procs).run(
            values_over({k: f.get("default") for k, f in own.items()}, cfg.raw))
        assert [p.message for p in static] == [p.message for p in full], case
        assert [p.site.rsplit(":", 1)[0] for p in static] == [p.site.rsplit(":", 1)[0] for p in full], case
        compared += 1
    assert compared >= 5
