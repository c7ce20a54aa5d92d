"""VersionBoard: monotonic weight-version announcements, both backends."""

from __future__ import annotations

import threading

import pytest
from queue_helpers import fresh_namespace

from easyvideor1.queue import (
    PayloadError,
    QueueClosedError,
    VersionError,
    VersionTimeoutError,
    WeightVersion,
    open_version_board,
)


@pytest.fixture()
def boards(backend_url):
    """``make(namespace=None)`` opens a board; boards made without a namespace share one."""
    default_ns = fresh_namespace()
    opened = []

    def make(namespace: str | None = None, **options):
        board = open_version_board(backend_url, namespace or default_ns, **options)
        opened.append(board)
        return board

    yield make
    for board in opened:
        board.close()


def test_publish_and_latest(boards):
    board = boards()
    assert board.latest() is None
    published = board.publish(3, "s3://ckpt/step-3", {"step": 3, "loss": 0.5})
    assert published == WeightVersion(3, "s3://ckpt/step-3", {"step": 3, "loss": 0.5})
    assert boards().latest() == published  # another handle of the same run sees it
    version, uri, meta = board.latest()
    assert (version, uri, meta) == (3, "s3://ckpt/step-3", {"step": 3, "loss": 0.5})
    board.publish(4, "s3://ckpt/step-4")
    assert board.latest() == (4, "s3://ckpt/step-4", {})


def test_versions_must_increase(boards):
    board = boards()
    board.publish(5, "s3://w/5")
    for stale in (5, 4, 0):
        with pytest.raises(VersionError, match=f"cannot publish weight version {stale}.*version 5"):
            boards().publish(stale, f"s3://w/{stale}")
    assert board.latest().version == 5


def test_wait_for_blocks_until_published(boards):
    board = boards()
    trainer = boards()
    board_version = board.publish(1, "s3://w/1")
    assert board.wait_for(1, timeout_s=1) == board_version  # already there: immediate

    timer = threading.Timer(0.2, lambda: trainer.publish(2, "s3://w/2", {"rank": 0}))
    timer.start()
    try:
        got = board.wait_for(2, timeout_s=10)
    finally:
        timer.join()
    assert got == WeightVersion(2, "s3://w/2", {"rank": 0})


def test_wait_for_times_out_naming_versions(boards):
    board = boards()
    board.publish(1, "s3://w/1")
    with pytest.raises(VersionTimeoutError, match=r">= 7 .*latest: 1"):
        board.wait_for(7, timeout_s=0.3)


def test_boards_are_isolated_by_namespace(boards):
    boards(fresh_namespace()).publish(9, "s3://a/9")
    assert boards(fresh_namespace()).latest() is None


def test_published_meta_is_a_copy(boards):
    board = boards()
    meta = {"tags": ["a"]}
    board.publish(1, "s3://w/1", meta)
    meta["tags"].append("mutated")
    assert board.latest().meta == {"tags": ["a"]}


@pytest.mark.parametrize(
    ("version", "uri", "meta", "needle"),
    [
        (-1, "s3://w", None, "integer"),
        (True, "s3://w", None, "integer"),
        (1.5, "s3://w", None, "integer"),
        (2**53, "s3://w", None, "integer"),
        (1, "", None, "uri"),
        (1, "s3://w", ["x"], "meta must be a dict"),
        (1, "s3://w", {"x": object()}, "not JSON-serialisable"),
    ],
)
def test_bad_publish_arguments(boards, version, uri, meta, needle):
    board = boards()
    with pytest.raises(PayloadError, match=needle):
        board.publish(version, uri, meta)
    assert board.latest() is None


def test_closed_board_refuses_use(boards):
    board = boards()
    board.close()
    with pytest.raises(QueueClosedError):
        board.latest()
