"""What the tests cost, from TRL_DOCTOR_TEST_TIMES's log (tests/conftest.py): seconds by lane, by file and by test.

    TRL_DOCTOR_TEST_TIMES=/tmp/times.tsv .ci/run
    python tools/test_times.py /tmp/times.tsv [--top 40]

Each line of the log is one test: seconds (set-up, call and tear-down), outcome, the Python installation that ran it
(one per CI lane), node id. The seconds are a test's own, not wall time: xdist runs two at once."""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path


def read(path: Path) -> list[tuple[float, str, str, str]]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        seconds, outcome, lane, node = line.split("\t", 3)
        rows.append((float(seconds), outcome, Path(lane).name, node))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args(argv)
    rows = read(args.log)
    by_lane: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    by_file: dict[tuple[str, str], float] = defaultdict(float)
    for seconds, _outcome, lane, node in rows:
        by_lane[lane][0] += seconds
        by_lane[lane][1] += 1
        by_file[(lane, node.split("::")[0])] += seconds
    print(f"{'lane':32} {'tests':>6} {'seconds':>9}")
    for lane, (seconds, count) in sorted(by_lane.items(), key=lambda kv: -kv[1][0]):
        print(f"{lane:32} {count:6d} {seconds:9.0f}")
    print(f"\n{'lane':24} {'file':56} {'seconds':>8}")
    for (lane, name), seconds in sorted(by_file.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"{lane:24} {name:56} {seconds:8.0f}")
    print(f"\n{'seconds':>8} {'outcome':8} {'lane':24} test")
    for seconds, outcome, lane, node in sorted(rows, key=lambda r: -r[0])[:args.top]:
        print(f"{seconds:8.1f} {outcome:8} {lane:24} {node}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
