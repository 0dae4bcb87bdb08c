"""Print, one a line, what installing trl-doctor with EXTRAS would pull in (pyproject.toml's dependencies and the
extras' requirements, `trl-doctor[x]` references followed): CI's background job installs a release lane's
third-party packages with them, without building trl-doctor itself (the lane installs it editable, --no-deps, when
its turn comes, so no two builds write the tree's metadata at once).

    python .ci/requirements.py test
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]
extras = project.get("optional-dependencies", {})
SELF = re.compile(r"^\s*trl-doctor\s*\[([^\]]+)\]\s*$")

out: list[str] = list(project.get("dependencies", []))
todo, seen = list(sys.argv[1:]), set()
while todo:
    extra = todo.pop()
    if extra in seen:
        continue
    seen.add(extra)
    for req in extras[extra]:
        m = SELF.match(req)
        if m:
            todo.extend(x.strip() for x in m.group(1).split(","))
        elif req not in out:
            out.append(req)
print("\n".join(out))
