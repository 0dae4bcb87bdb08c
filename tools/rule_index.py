"""Write trl_doctor/data/rule_index.json: the built-in rules' declarations as data (trl_doctor.rule_index), read by
the command line's own process instead of importing every rule module and the facts they judge with.

    python tools/rule_index.py            # (re)write it after changing a rule's declaration or docstring
    python tools/rule_index.py --check    # exit 1 where the committed index differs from the rules

A stale index is never wrong (a module whose source changed is imported as before), only slower: the test suite
(tests/test_rule_index.py) says when it must be written again.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed index, write nothing")
    args = ap.parse_args()
    from trl_doctor.registry import index_data
    from trl_doctor.rule_index import INDEX

    text = json.dumps(index_data(), indent=1, sort_keys=True) + "\n"
    if args.check:
        same = INDEX.is_file() and INDEX.read_text(encoding="utf-8") == text
        print(f"{INDEX.relative_to(ROOT)}: {'up to date' if same else 'stale: python tools/rule_index.py'}")
        return 0 if same else 1
    from trl_doctor.watch import write_atomic

    write_atomic(INDEX, text)
    print(f"wrote {INDEX.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
