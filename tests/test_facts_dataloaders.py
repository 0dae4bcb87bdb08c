"""batch-geometry's reading of the installed accelerate (rules/batch_geometry.py, `empty_loader_yields_none`): what
a prepared dataloader that holds no batch yields, asked of accelerate itself (no version table). TRL's PPO-style
trainers loop over such a dataloader in their sample generation (`for batch in self.eval_dataloader: query =
batch["input_ids"]`); the reading must say whether that loop stops."""

from __future__ import annotations

from importlib.metadata import version

from packaging.version import Version


def _trls_loop_stops() -> bool:
    """TRL's own loop (ppo_trainer.py / rloo_trainer.py generate_completions) over an empty eval set, prepared as
    the trainer prepares it (drop_last=True, through accelerate)."""
    from accelerate.data_loader import prepare_data_loader
    from torch.utils.data import DataLoader

    rows = [{"input_ids": [1, 2]}] * 3  # three rows, a batch of eight: drop_last leaves nothing
    loader = prepare_data_loader(DataLoader(rows, batch_size=8, drop_last=True), num_processes=1, process_index=0,
                                 put_on_device=False)
    try:
        for batch in loader:
            batch["input_ids"]
    except TypeError as exc:
        assert "not subscriptable" in str(exc)
        return True
    return False


def test_the_fact_says_what_trls_loop_meets():
    from trl_doctor.rules.batch_geometry import empty_loader_yields_none

    assert empty_loader_yields_none() is _trls_loop_stops()


def test_accelerate_changed_it_in_1_9():
    """The release history the explain text cites (accelerate's DataLoaderShard.__iter__: `yield` before 1.9,
    `self.end(); return` from 1.9), held against the installed release."""
    from trl_doctor.rules.batch_geometry import empty_loader_yields_none

    assert empty_loader_yields_none() is (Version(version("accelerate")) < Version("1.9"))
