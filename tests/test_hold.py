"""The user's folders held (trl_doctor/runtime/hold.py): in a forked child that takes a user namespace of its own, as
the worker does, every write into a held folder lands in the check's layer; the folder itself is unchanged; the
layer goes with tmp.remove even where the writes left folders without permissions; a folder that holds mounts of
its own is not held, and says why. In-process (a fork), no check started: these are the mechanism's own cases; the
checks that hold a launch's and a reward's writes are in tests/test_launch.py, test_launch_children.py, test_fence.py
and test_worker_hygiene.py."""

from __future__ import annotations

import json
import os
import shutil
import stat

import pytest

from trl_doctor.runtime import hold, netns, tmp


def _in_child(fn) -> dict:
    """fn() run in a forked child (its namespaces die with it); what it returned (JSON), or its exception's words."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        try:
            out = {"ok": fn()}
        except BaseException as exc:  # noqa: BLE001 - said to the parent
            out = {"error": f"{type(exc).__name__}: {exc}"}
        os.write(write, json.dumps(out).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        said = json.loads(f.read() or '{"error": "the child died"}')
    os.waitpid(pid, 0)
    assert "error" not in said, said["error"]
    return said["ok"]


@pytest.fixture
def user_namespaces():
    if not netns.probe().namespace:
        pytest.skip("no unprivileged user namespace here (the report's notes say 'left in place')")


def _as_nobody_if_root() -> None:
    """Drop root, as a user runs the doctor: folders without permissions then stop a plain removal."""
    if os.geteuid() == 0:
        import ctypes

        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
        ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: /proc/self/uid_map is this user's again


@pytest.fixture
def shared_tmp():
    """A folder any user may enter (pytest's own is its user's only): the child runs as nobody under root."""
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp(prefix="trl-doctor-test-hold-"))
    os.chmod(path, 0o777)
    yield path
    tmp.remove(path)


@pytest.mark.usefixtures("user_namespaces")
def test_writes_into_a_held_folder_land_in_the_layer_and_the_layer_goes(shared_tmp):
    folder, layer = shared_tmp / "project", shared_tmp / "check" / "held"
    folder.mkdir()
    (folder / "config.yaml").write_text("lr: 1e-5\n")
    (folder / "old.txt").write_text("kept\n")
    (shared_tmp / "check").mkdir(mode=0o777)
    os.chmod(shared_tmp / "check", 0o777)
    for p in (folder, folder / "config.yaml", folder / "old.txt", shared_tmp / "check"):
        if os.geteuid() == 0:  # the user's own files, as the child's user (an unmapped owner's file is not copied up)
            os.chown(p, 65534, 65534)
    before = shutil.disk_usage(folder)

    def child():
        _as_nobody_if_root()
        netns._user_namespace()
        refused = hold.mount([folder, folder / "sub"], layer)  # the inner one is held by the outer overlay
        os.chdir(folder)
        (folder / "config.yaml").write_text("lr: 1.0\n")
        (folder / "old.txt").unlink()
        os.makedirs("out/v0-1")
        (folder / "out" / "v0-1" / "args.json").write_text("{}")
        os.chmod(folder / "out" / "v0-1", 0o555)
        os.chmod(folder / "out", 0o500)
        usage = hold.disk_usage(folder / "out")
        return {"refused": refused, "held": hold.held(), "seen": sorted(os.listdir(folder)),
                "total": usage.total, "holder": hold.holder(folder / "out" / "x")}

    said = _in_child(child)
    assert said["refused"] == {} and list(said["held"]) == [str(folder)], said
    assert said["seen"] == ["config.yaml", "out"] and said["holder"] == str(folder)
    assert said["total"] == before.total  # the folder's own disk, not the layer's
    assert sorted(os.listdir(folder)) == ["config.yaml", "old.txt"]
    assert (folder / "config.yaml").read_text() == "lr: 1e-5\n" and (folder / "old.txt").read_text() == "kept\n"
    assert (layer / "0" / "upper" / "out" / "v0-1" / "args.json").exists()

    def remove():
        _as_nobody_if_root()
        tmp.remove(layer.parent)
        return layer.parent.exists()

    assert _in_child(remove) is False


@pytest.mark.usefixtures("user_namespaces")
def test_a_folder_holding_mounts_of_its_own_or_read_only_is_not_held_and_says_why(tmp_path):
    """An overlay would hide the mount inside the one, and make the other look writable to the rules that ask
    (save-outputs): neither is held."""
    folder, layer, frozen = tmp_path / "project", tmp_path / "check" / "held", tmp_path / "frozen"
    (folder / "data").mkdir(parents=True)
    frozen.mkdir()

    def child():
        import ctypes

        netns._user_namespace()
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.unshare(hold.CLONE_NEWNS) == 0
        assert libc.mount(b"none", b"/", None, 0x4000 | 0x40000, None) == 0
        assert libc.mount(b"tmpfs", os.fsencode(folder / "data"), b"tmpfs", 0, b"size=1m") == 0
        ro = os.fsencode(frozen)
        assert libc.mount(ro, ro, None, 0x1000, None) == 0  # MS_BIND, then MS_REMOUNT | MS_BIND | MS_RDONLY
        assert libc.mount(None, ro, None, 0x20 | 0x1000 | 0x1, None) == 0
        return {"refused": hold.mount([folder, frozen], layer), "held": hold.held()}

    said = _in_child(child)
    assert said["held"] == {} and said["refused"] == {
        str(folder): "it holds mounts of its own, which an overlay would hide",
        str(frozen): "its file system is read-only: nothing is written there anyway"}, said


def test_the_check_s_own_folder_is_never_held_under_itself(tmp_path):
    """A folder holding the check's temporary folder (a check run from /tmp) would put the layer inside what it
    holds: refused, said, decided before any mount."""
    layer = tmp_path / "trl-doctor-x" / "held"
    assert hold._why_not(str(tmp_path), layer, []) == "it holds the check's own temporary folder"
    assert hold._why_not(str(tmp_path / "a,b"), layer, []) == "not a folder"
    (tmp_path / "a,b").mkdir()
    assert "`,` `:`" in hold._why_not(str(tmp_path / "a,b"), tmp_path / "elsewhere", [])
    assert hold.outermost([tmp_path / "a", tmp_path, tmp_path / "a" / "b"]) == [str(tmp_path)]
    assert not stat.S_ISLNK(os.lstat(tmp_path).st_mode)


def test_the_folders_a_command_line_names_are_its_paths_nearest_folders(tmp_path):
    """`--output_dir /data/run1` (not made yet) names /data; a recipe's file names its folder; the root, the system's
    folders, the Python installation (a framework's child `<site-packages>/pkg/cli/rlhf.py`) and URLs name none."""
    import sys
    import sysconfig

    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "grpo.yaml").write_text("lr: 1e-5\n")
    site = sysconfig.get_paths()["purelib"]
    argv = ["python", f"{site}/swift/cli/rlhf.py", "--output_dir", str(tmp_path / "runs" / "run1"),
            "--config=recipes/grpo.yaml", "/usr/lib/x.py", "/nonexistent-root-folder/out", "--url",
            "http://10.0.0.2:8000/v1", sys.executable, "plain-word"]
    assert hold.named_folders(argv, str(tmp_path)) == [str(tmp_path.resolve()), str((tmp_path / "recipes").resolve())]


def test_a_recipe_the_command_line_names_adds_the_folders_it_names(tmp_path):
    """`--config recipe.yaml` whose `output_dir: /data/runs/grpo` is the only mention of that folder: its nearest
    existing folder is held too (issue 58); URLs, relative paths (the working directory, held already), system
    folders and a recipe that cannot be read add none."""
    (tmp_path / "data").mkdir()
    (tmp_path / "home").mkdir()
    (tmp_path / "recipe.yaml").write_text(
        f"output_dir: {tmp_path / 'data' / 'runs' / 'grpo'}\n"
        "vllm_server: http://10.0.0.2:8000/v1/models\nrel: saves/ppo\nlib: /usr/lib/x.so\n"
        f'datasets: [{{path: "{tmp_path / "home" / "x.jsonl"}"}}]\n')
    (tmp_path / "broken.json").mkdir()  # a folder named like a recipe: read as nothing
    argv = ["axolotl", "train", "recipe.yaml", "--extra=broken.json"]
    assert hold.named_folders(argv, str(tmp_path)) == [str((tmp_path / "data").resolve()),
                                                       str((tmp_path / "home").resolve())]
    assert hold.recipe_paths(tmp_path / "recipe.yaml")[:2] == [str(tmp_path / "data" / "runs" / "grpo"),
                                                               "/usr/lib/x.so"]


@pytest.mark.usefixtures("user_namespaces")
def test_the_scouts_pth_lands_in_the_checks_layer_only_and_is_not_the_launchs_write(shared_tmp, monkeypatch):
    """seed_site (a child started with -I or -E reads site-packages' .pth files, not PYTHONPATH): a site-packages
    inside a held folder (a project's .venv) gets the file in that folder's layer; one outside is overlaid first. The
    real folders never get it, and written() (the launch's notes) names neither, only what the launch itself wrote."""
    import site

    project, elsewhere, layer = shared_tmp / "project", shared_tmp / "python", shared_tmp / "check" / "held"
    inner = project / ".venv" / "lib" / "site-packages"
    outer = elsewhere / "lib" / "site-packages"
    inner.mkdir(parents=True)
    outer.mkdir(parents=True)
    monkeypatch.setattr(site, "getsitepackages", lambda: [str(inner), str(outer)])

    def child():
        netns._user_namespace()
        hold.mount([project], layer)
        seeded = hold.seed_site("import os\n", layer.parent / "held-site")
        (project / "out").mkdir()  # the launch's own write
        return {"seeded": seeded, "written": hold.written(), "seen": [os.path.exists(p) for p in seeded]}

    said = _in_child(child)
    assert said["seeded"] == [str(inner / hold.SCOUT_PTH), str(outer / hold.SCOUT_PTH)] and all(said["seen"]), said
    assert said["written"] == [f"{project / 'out'}/"], said
    assert not (inner / hold.SCOUT_PTH).exists() and not (outer / hold.SCOUT_PTH).exists()
