"""Where a launch command's exit-2 line points (issue 30, class 8): at the user's own line, and, when the error was
raised inside a library, at that frame too, named by its package.

Before, "the user's line" was the innermost frame outside site-packages: a Cython frame (`pyarrow/error.pxi`, which
names its source relative to the package) or a package found through PYTHONPATH was taken for the user's file. Each
case runs a real script through the real command in a fresh process.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import run_doctor

pytestmark = pytest.mark.release_free  # the doctor's own reading of a traceback


def _exit_line(tmp_path, script: str, env: dict | None = None) -> str:
    return _the_error_line(run_doctor("check", "--no-smoke", "--", "python", script, cwd=tmp_path, env=env or {}))


def _the_error_line(proc) -> str:
    """The one `trl-doctor: error:` line of a check that exited 2."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("trl-doctor: error:")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_an_error_raised_in_pyarrow_points_at_the_users_line_and_names_pyarrow(tmp_path):
    (tmp_path / "train.py").write_text(
        "from datasets import Dataset\n"
        "rows = {'prompt': ['what is 2+2?', ['not', 'text']]}\n"
        "dataset = Dataset.from_dict(rows)\n")
    line = _exit_line(tmp_path, "train.py")
    assert "ArrowTypeError" in line, line
    assert f"(at {tmp_path / 'train.py'}:3, raised in pyarrow at pyarrow/" in line, line



def test_the_public_geoqa_prompt_that_pyarrow_refuses_points_at_the_scripts_map():
    """The public case (fixtures/launch/grpo_geoqa_mixed_content.py): huggingface/datasets#7418's R1-V GeoQA prompt,
    a string and a list as message content in one column. At 810e101^ the line was "(at pyarrow/error.pxi:92)"."""
    from conftest import FIXTURES

    launch = FIXTURES / "launch"
    line = _exit_line(launch, "grpo_geoqa_mixed_content.py")
    assert "ArrowInvalid: cannot mix list and non-list, non-null values" in line, line
    script = launch / "grpo_geoqa_mixed_content.py"
    at = next(n for n, text in enumerate(script.read_text().splitlines(), 1)
              if text.startswith("dataset = dataset.map("))
    assert f"(at {script}:{at}, raised in pyarrow at pyarrow/" in line, line

def test_a_package_on_pythonpath_outside_the_project_is_a_library(tmp_path):
    project, elsewhere = tmp_path / "project", tmp_path / "libs"
    (elsewhere / "mylib").mkdir(parents=True)
    (elsewhere / "mylib" / "__init__.py").write_text(
        "def load(path):\n    raise FileNotFoundError(f'no dataset at {path}')\n")
    project.mkdir()
    (project / "train.py").write_text("import mylib\n\nmylib.load('data/missing.jsonl')\n")
    pythonpath = os.pathsep.join(filter(None, [str(elsewhere), os.environ.get("PYTHONPATH")]))
    line = _exit_line(project, "train.py", env={"PYTHONPATH": pythonpath})
    assert (f"(at {project / 'train.py'}:3, raised in mylib at {elsewhere / 'mylib' / '__init__.py'}:2)") in line, line


def test_a_helper_module_of_the_scripts_folder_is_the_users_line(tmp_path):
    (tmp_path / "helper.py").write_text("def load(path):\n    raise FileNotFoundError(f'no dataset at {path}')\n")
    (tmp_path / "train.py").write_text("import helper\n\nhelper.load('data/missing.jsonl')\n")
    line = _exit_line(tmp_path, "train.py")
    assert line.endswith(f"FileNotFoundError: no dataset at data/missing.jsonl (at {tmp_path / 'helper.py'}:2)"), line


@pytest.mark.boundary  # a process of its own, seconds long: CI's boundary step
def test_a_copy_of_the_installed_transformers_on_pythonpath_is_a_library(tmp_path):
    """The case the issue saw: a transformers found through PYTHONPATH (a copy of the installed package, as a project
    that patches transformers puts it there) raised the error; the line named its frame as the user's."""
    import shutil

    import transformers

    copy = tmp_path / "patched"
    shutil.copytree(os.path.dirname(transformers.__file__), copy / "transformers",
                    ignore=shutil.ignore_patterns("__pycache__"))
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(
        "from transformers import AutoConfig\n\n"
        "config = AutoConfig.from_pretrained('./no-such-model')\n")
    pythonpath = os.pathsep.join(filter(None, [str(copy), os.environ.get("PYTHONPATH")]))
    line = _exit_line(project, "train.py", env={"PYTHONPATH": pythonpath})
    assert f"(at {project / 'train.py'}:3, raised in transformers at {copy / 'transformers'}{os.sep}" in line, line


@pytest.mark.boundary  # a process of its own, seconds long: CI's boundary step
def test_a_copy_of_an_installed_package_put_on_pythonpath_inside_the_project_is_a_library(tmp_path):
    """A project that vendors a patched transformers in its own repository (`PYTHONPATH=vendor`): the copy shadows an
    installed library, so its frame is the library's, and the user's line is the script's."""
    import shutil

    import transformers

    vendor = tmp_path / "vendor"
    shutil.copytree(os.path.dirname(transformers.__file__), vendor / "transformers",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "train.py").write_text(
        "from transformers import AutoConfig\n\n"
        "config = AutoConfig.from_pretrained('./no-such-model')\n")
    pythonpath = os.pathsep.join(filter(None, [str(vendor), os.environ.get("PYTHONPATH")]))
    line = _exit_line(tmp_path, "train.py", env={"PYTHONPATH": pythonpath})
    assert f"(at {tmp_path / 'train.py'}:3, raised in transformers at {vendor / 'transformers'}{os.sep}" in line, line


def _python_with_editable_installs(tmp_path, *roots) -> str:
    """An interpreter of its own (a venv over this one's packages) in which each root is installed editable, as pip
    installs a src layout: a `.pth` file of its site-packages adds the root to sys.path."""
    import subprocess
    import sysconfig
    import venv

    env = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env)
    python = env / "bin" / "python"
    site_dir = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
    stack = sysconfig.get_paths()["purelib"]
    (Path(site_dir) / "stack.pth").write_text(f"import site; site.addsitedir({stack!r})\n")
    for n, root in enumerate(roots):
        (Path(site_dir) / f"__editable__.project{n}-0.1.pth").write_text(f"{root}\n")
    return str(python)


def _exit_line_with(python: str, cwd, *command: str) -> str:
    import subprocess

    env = dict(os.environ, PATH=os.pathsep.join([os.path.dirname(python), os.environ.get("PATH", "")]))
    return _the_error_line(subprocess.run([python, "-m", "trl_doctor", "check", "--no-smoke", "--", *command], cwd=cwd,
                                          env=env, capture_output=True, text=True, timeout=600))


@pytest.mark.boundary  # a real process boundary, seconds long: CI's boundary step
def test_a_fork_of_transformers_vendored_in_the_repository_and_installed_editable_is_a_library(tmp_path):
    """The layout of tmc/Gnosis @ 80ccf180b6d9 (its README: `transformers/`, a local Transformers fork beside the
    training code, installed with `pip install -e ./transformers`): the fork's files are inside the user's git work
    tree, yet a library's. Before, the line named the fork's frame as the user's."""
    import shutil
    import subprocess

    import transformers

    project = tmp_path / "project"
    shutil.copytree(os.path.dirname(transformers.__file__), project / "transformers" / "src" / "transformers",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (project / "scripts").mkdir()
    (project / "scripts" / "train.py").write_text(
        "from transformers import AutoConfig\n\nconfig = AutoConfig.from_pretrained('./no-such-model')\n")
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    python = _python_with_editable_installs(tmp_path, project / "transformers" / "src")
    line = _exit_line_with(python, project, "python", "scripts/train.py")
    fork = project / "transformers" / "src" / "transformers"
    assert f"(at {project / 'scripts' / 'train.py'}:3, raised in transformers at {fork}{os.sep}" in line, line


@pytest.mark.boundary  # a real process boundary, seconds long: CI's boundary step
def test_the_users_own_project_installed_editable_stays_the_users_run_as_a_module(tmp_path):
    """`pip install -e .` of the user's own src-layout project, launched as `python -m pkg.train` (open-r1's shape):
    its files stay the user's, so the line is its helper's, with no library named."""
    import subprocess

    project = tmp_path / "project"
    package = project / "src" / "myproj"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "helpers.py").write_text("def load(path):\n    raise FileNotFoundError(f'no dataset at {path}')\n")
    (package / "train.py").write_text("from myproj import helpers\n\nhelpers.load('data/missing.jsonl')\n")
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    python = _python_with_editable_installs(tmp_path, project / "src")
    line = _exit_line_with(python, project, "python", "-m", "myproj.train")
    assert line.endswith(f"FileNotFoundError: no dataset at data/missing.jsonl (at {package / 'helpers.py'}:2)"), line
