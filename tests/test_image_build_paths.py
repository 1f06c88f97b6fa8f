"""``whatif images build``: every unusable ``--repo``, ``--maven-repo`` or ``--logs`` path is one
``error:`` line given before a container engine is asked or anything is built, made or written,
and a file named like a build log that whatif did not write is never replaced. No engine is
needed: the engine look-up fails the test if it is reached (the builds themselves are in the
``containers`` tier, ``tests/test_containers.py``)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from tests.conftest import run_main as run
from whatif_bench.simulators import containers

REPO = Path(__file__).resolve().parents[1]


def _state(root: Path) -> dict[str, str]:
    """Every entry under ``root``: what it is, and a file's SHA-256 (links are not followed)."""
    state = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        if path.is_symlink():
            state[name] = f"link to {os.readlink(path)}"
        elif path.is_file():
            state[name] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            state[name] = "folder" if path.is_dir() else "special"
    return state


def loop(root):
    (root / "loop").symlink_to(root / "loop")
    return root / "loop"


def fifo(root):
    os.mkfifo(root / "fifo")
    return root / "fifo"


def a_file(root):
    (root / "file.txt").write_text("the user's notes\n")
    return root / "file.txt"


def dangling(root):
    (root / "dangling").symlink_to(root / "nowhere")
    return root / "dangling"


def logs_with(root, name, make):
    """A logs folder whose ``name`` entry ``make(path)`` makes; returns the folder."""
    folder = root / "logs"
    folder.mkdir()
    make(folder / name)
    return folder


def users_log(path):
    path.write_text("my own notes, not a build log\n")


def link_to_users_file(path):
    (path.parent.parent / "notes.txt").write_text("my notes\n")
    path.symlink_to(path.parent.parent / "notes.txt")


# (id, the options, the error line), each built in a fresh folder ``root``
BAD_PATHS = [
    (
        "repo_loop",
        lambda r: ["--repo", str(loop(r))],
        lambda r: (
            f"{r}/loop: the repository folder is a symbolic link loop, not a regular file or folder"
        ),
    ),
    (
        "repo_fifo",
        lambda r: ["--repo", str(fifo(r))],
        lambda r: f"{r}/fifo: the repository folder is a FIFO (named pipe), not a regular file",
    ),
    (
        "maven_repo_loop",
        lambda r: ["--image", "opendc", "--maven-repo", str(loop(r))],
        lambda r: (
            f"{r}/loop: the Maven repository is a symbolic link loop, not a regular file or folder"
        ),
    ),
    (
        "logs_regular_file",
        lambda r: ["--logs", str(a_file(r))],
        lambda r: f"{r}/file.txt: exists and is not a folder",
    ),
    (
        "logs_fifo",
        lambda r: ["--logs", str(fifo(r))],
        lambda r: f"{r}/fifo: the output is a FIFO (named pipe), not a regular file",
    ),
    (
        "logs_dev_null",
        lambda r: ["--logs", "/dev/null"],
        lambda r: "/dev/null: the output is a character device, not a regular file",
    ),
    (
        "logs_loop",
        lambda r: ["--logs", str(loop(r))],
        lambda r: f"{r}/loop: the output is a symbolic link loop, not a regular file or folder",
    ),
    (
        "logs_dangling_link",
        lambda r: ["--logs", str(dangling(r))],
        lambda r: f"{r}/dangling: is a symbolic link to nothing ({r}/nowhere); give a folder",
    ),
    (
        "logs_under_a_file",
        lambda r: ["--logs", str(a_file(r) / "x")],
        lambda r: f"{r}/file.txt/x: {r}/file.txt is a file, not a folder",
    ),
    ("logs_empty", lambda r: ["--logs", ""], lambda r: "the output path is empty"),
    (
        "log_of_the_user",
        lambda r: ["--logs", str(logs_with(r, "epanet.log", users_log))],
        lambda r: (
            f"{r}/logs/epanet.log: exists and is not a build log whatif wrote (it does "
            "not open with '# whatif images build log:'); refusing to replace it: delete it by "
            "hand or choose another --logs folder"
        ),
    ),
    (
        "log_links_to_a_users_file",
        lambda r: ["--logs", str(logs_with(r, "epanet.log", link_to_users_file))],
        lambda r: (
            f"{r}/logs/epanet.log: is a symbolic link; refusing to replace it: give the "
            "file itself or another name"
        ),
    ),
    (
        "log_links_to_dev_null",
        lambda r: ["--logs", str(logs_with(r, "epanet.log", lambda p: p.symlink_to("/dev/null")))],
        lambda r: f"{r}/logs/epanet.log: the output is a character device, not a regular file",
    ),
    (
        "log_is_a_fifo",
        lambda r: ["--logs", str(logs_with(r, "epanet.log", os.mkfifo))],
        lambda r: f"{r}/logs/epanet.log: the output is a FIFO (named pipe), not a regular file",
    ),
    (
        "log_is_a_folder",
        lambda r: ["--logs", str(logs_with(r, "epanet.log", Path.mkdir))],
        lambda r: f"{r}/logs/epanet.log: is a folder; give a file name",
    ),
]


@pytest.mark.parametrize(("case", "options", "line"), BAD_PATHS, ids=[c[0] for c in BAD_PATHS])
def test_a_bad_build_path_is_one_error_line_before_any_work(
    tmp_path, capsys, monkeypatch, case, options, line
):
    def no_engine(*args, **kwargs):
        raise AssertionError("the container engine was asked")

    monkeypatch.setattr(containers, "find_engine", no_engine)
    monkeypatch.setattr(containers, "build_image", no_engine)
    root = tmp_path / "root"
    root.mkdir()
    argv = ["images", "build", "--image", "epanet", "--repo", str(REPO), *options(root)]
    before = _state(root)
    code, out, err = run(capsys, *argv)
    assert code == 1 and out == ""
    assert err == f"error: {line(root)}\n"
    assert _state(root) == before  # nothing made, written or replaced


def test_a_log_whatif_wrote_is_accepted_for_replacing(tmp_path):
    log = tmp_path / "epanet.log"
    log.write_text(f"{containers.LOG_HEADER}localhost/whatif-epanet:0 built by podman\nSTEP 1/2\n")
    assert containers.check_build_log(log) == log
    assert containers.check_build_log(tmp_path / "sumo.log") == tmp_path / "sumo.log"


# `whatif images build --parallel N`: builds run N at a time and are reported in the order asked.
def _fake_builds(monkeypatch, seconds: dict[str, float], failing: str | None = None):
    """``build_image`` replaced by a sleep of ``seconds[image]`` (``failing`` raises), and
    ``remove_superseded`` by a record; returns the log of (event, image, builds running at that
    moment), events ``start``, ``end`` and ``prune``. A build asked to prune its own leftovers
    fails the test: ``build_images`` prunes after its last build."""
    import threading
    import time

    lock = threading.Lock()
    running: set[str] = set()
    events: list[tuple[str, str, int]] = []

    def fake(engine, image, repo, base=None, maven_repo=None, log=None, prune=True):
        assert not prune, "a build of build_images removed its leftovers itself"
        with lock:
            running.add(image)
            events.append(("start", image, len(running)))
        time.sleep(seconds[image])
        with lock:
            running.discard(image)
            events.append(("end", image, len(running)))
        if image == failing:
            raise containers.ContainerError(f"image {image}: build failed at step 'RUN x'")
        return containers.BuiltImage(f"localhost/whatif-{image}:0", seconds[image], 1)

    def prune(engine, image):
        with lock:
            events.append(("prune", image, len(running)))

    monkeypatch.setattr(containers, "build_image", fake)
    monkeypatch.setattr(containers, "remove_superseded", prune)
    return events


def test_builds_run_parallel_at_a_time_after_the_first_and_come_in_the_order_asked(monkeypatch):
    seconds = {"epanet": 0.05, "sumo": 0.3, "gridlabd": 0.05, "toolkit": 0.05}
    events = _fake_builds(monkeypatch, seconds)
    built = list(containers.build_images(None, list(seconds), REPO, parallel=2))
    assert [b.ref for b in built] == [f"localhost/whatif-{image}:0" for image in seconds]
    # the first build runs alone (it makes the layers the others share), then two at a time
    assert events[:2] == [("start", "epanet", 1), ("end", "epanet", 0)]
    assert max(count for _, _, count in events) == 2  # never more than parallel at once
    # the slow second build did not hold the others back: they ended before it did
    ends = [image for event, image, _ in events if event == "end"]
    assert ends[-1] == "sumo"


def test_a_single_image_builds_alone_whatever_the_number_at_once(monkeypatch):
    events = _fake_builds(monkeypatch, {"opendc": 0.01})
    built = list(containers.build_images(None, ["opendc"], REPO, parallel=3))
    assert [b.ref for b in built] == ["localhost/whatif-opendc:0"]
    assert [(e, i) for e, i, _ in events] == [
        ("start", "opendc"),
        ("end", "opendc"),
        ("prune", "opendc"),
    ]


def test_one_at_a_time_builds_one_after_another(monkeypatch):
    seconds = {"epanet": 0.01, "sumo": 0.01, "toolkit": 0.01}
    events = _fake_builds(monkeypatch, seconds)
    list(containers.build_images(None, list(seconds), REPO, parallel=1))
    # the leftovers of every build are removed after the last one (a later build reuses the
    # layers an earlier one made)
    assert [(e, i) for e, i, _ in events] == [
        (event, image) for image in seconds for event in ("start", "end")
    ] + [("prune", image) for image in seconds]


def test_a_failed_build_is_its_error_and_later_builds_do_not_begin(monkeypatch):
    seconds = {"epanet": 0.01, "sumo": 0.05, "gridlabd": 0.2, "opendc": 0.01, "toolkit": 0.01}
    events = _fake_builds(monkeypatch, seconds, failing="sumo")
    builds = containers.build_images(None, list(seconds), REPO, parallel=2)
    with pytest.raises(containers.ContainerError, match="^image sumo: build failed"):
        list(builds)
    started = [image for event, image, _ in events if event == "start"]
    assert started == ["epanet", "sumo", "gridlabd"]  # none begun once a build had failed
    ended = [image for event, image, _ in events if event == "end"]
    assert sorted(ended) == ["epanet", "gridlabd", "sumo"]
    # only the builds that succeeded are pruned, after the running ones ended
    assert [(e, i, n) for e, i, n in events if e == "prune"] == [
        ("prune", "epanet", 0),
        ("prune", "gridlabd", 0),
    ]
    assert events[-1][0] == "prune"


def test_a_failed_first_build_begins_no_other(monkeypatch):
    seconds = {"epanet": 0.01, "sumo": 0.01, "toolkit": 0.01}
    events = _fake_builds(monkeypatch, seconds, failing="epanet")
    with pytest.raises(containers.ContainerError, match="^image epanet: build failed"):
        list(containers.build_images(None, list(seconds), REPO, parallel=2))
    assert [(e, i) for e, i, _ in events] == [("start", "epanet"), ("end", "epanet")]


def test_one_at_a_time_a_failed_build_stops_the_others(monkeypatch):
    seconds = {"epanet": 0.01, "sumo": 0.01, "toolkit": 0.01}
    events = _fake_builds(monkeypatch, seconds, failing="sumo")
    with pytest.raises(containers.ContainerError, match="^image sumo: build failed"):
        list(containers.build_images(None, list(seconds), REPO, parallel=1))
    assert [image for event, image, _ in events if event == "start"] == ["epanet", "sumo"]
    assert [image for event, image, _ in events if event == "prune"] == ["epanet"]


@pytest.mark.parametrize("parallel", [0, -1, True, 1.5])
def test_a_bad_number_of_builds_at_once_is_refused(parallel):
    with pytest.raises(ValueError, match="number of builds at once"):
        list(containers.build_images(None, ["epanet"], REPO, parallel=parallel))


def test_the_build_command_says_parallel_and_its_default(capsys):
    code, out, _ = run(capsys, "images", "build", "--help")
    help_text = " ".join(out.split())
    assert code == 0
    assert "images built at once after the first, which builds alone" in help_text
    assert f"(default: {containers.DEFAULT_PARALLEL_BUILDS})" in help_text
