"""On a terminal the table streams: the header at once, each rule's row as its result arrives, then the details
and the summary. Through the real command, the streamed lines are exactly the lines of the table written at
once, in the same run order (static rules, then the rules that read the trainer run)."""

from __future__ import annotations

import pytest

import os

from conftest import FIXTURES, run_doctor

pytestmark = pytest.mark.release_free  # the doctor's own code: no release changes the outcome

CASE = str(FIXTURES / "trainer-config" / "ok_grpo.yaml")


def test_streamed_table_equals_the_table_written_at_once(built_fixtures):
    args = ("check", CASE, "--no-smoke", "--select", "pad-token,eos-termination,trainer-config,batch-geometry")
    streamed = run_doctor(*args, env={"TRL_DOCTOR_STREAM": "1", "TRL_DOCTOR_FORKSERVER": os.environ.get("TRL_DOCTOR_FORKSERVER", "")})
    whole = run_doctor(*args, env={"TRL_DOCTOR_STREAM": "0", "TRL_DOCTOR_FORKSERVER": os.environ.get("TRL_DOCTOR_FORKSERVER", "")})
    assert streamed.returncode == whole.returncode, streamed.stderr
    assert streamed.stdout == whole.stdout
    rows = [line.split()[0] for line in whole.stdout.splitlines() if line.startswith("TD0")]
    # run order: the static group by id, then the trainer-run group
    assert rows == ["TD001", "TD009", "TD010", "TD004"]
