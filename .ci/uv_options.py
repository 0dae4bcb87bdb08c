"""Print, one a line, the `uv pip install` options that make uv install what pip installs on this machine: the
package sources and constraints pip's configuration sets (`pip config list`: files and PIP_* variables), and pip's
way of choosing among indexes (the best version from any of them, where uv's default takes the first index that has
a package at all). CI's background job installs the release lanes' environments with uv where it could install uv.

    python .ci/uv_options.py
"""

from __future__ import annotations

import shlex
import subprocess
import sys

# pip's key -> uv's option; each value may hold several entries, split as pip splits them (on whitespace)
OPTIONS = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links",
           "constraint": "--constraint"}


def pip_config() -> dict[str, str]:
    """pip's effective settings: a PIP_* variable (scope `:env:`) over the files, a later file over an earlier one."""
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True)
    files: dict[str, str] = {}
    environment: dict[str, str] = {}
    for line in out.stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            scope, _, name = key.rpartition(".")
            (environment if scope == ":env:" else files)[name] = " ".join(shlex.split(value))
    return {**files, **environment}


def main() -> None:
    config = pip_config()
    # pip's main index first among uv's (uv asks its extra indexes before its default one, and takes a version's files
    # from the first index that has the version): this machine's local indexes list some releases' wheels in an order
    # that made uv install multiprocess 0.70.19's py310 wheel on Python 3.11 where pip takes its py311 one
    args = ["--index-strategy", "unsafe-best-match", "--extra-index-url",
            config.get("index-url", "https://pypi.org/simple").split()[0]]
    for key, value in config.items():
        if key in OPTIONS:
            for entry in value.split():
                args += [OPTIONS[key], entry]
    print("\n".join(args))


if __name__ == "__main__":
    main()
