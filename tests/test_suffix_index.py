"""The suffix index of hybrid drafting against a brute-force search, on random token streams."""

from __future__ import annotations

import random
import threading

import pytest

from dlite_hf import DraftSession
from dlite_hf.modeling.suffix_index import SuffixIndex


def _brute_force(texts: list[list[int]], current: list[int], max_tokens: int) -> tuple[int, list[list[int]]]:
    """Longest suffix of `current` that also ends at another position of `texts` + `current` (not `current`'s end),
    and every continuation (up to `max_tokens`) that follows one of its occurrences."""
    n = len(current)
    for length in range(n, 0, -1):
        suffix = current[n - length :]
        continuations = []
        for text_index, text in enumerate([*texts, current]):
            is_current = text_index == len(texts)
            for end in range(length - 1, len(text)):
                if is_current and end == n - 1:
                    continue
                if text[end - length + 1 : end + 1] == suffix:
                    continuations.append(text[end + 1 : end + 1 + max_tokens])
        if continuations:
            return length, continuations
    return 0, [[]]


@pytest.mark.parametrize("alphabet", [2, 3, 8])
def test_lookup_matches_brute_force_while_the_stream_grows(alphabet):
    rng = random.Random(alphabet)
    index = SuffixIndex()
    stream: list[int] = []
    while len(stream) < 160:
        chunk = [rng.randrange(alphabet) for _ in range(rng.randint(1, 5))]  # rounds commit 1..5 tokens
        index.append(chunk)
        stream += chunk
        for max_tokens in (1, 4, 9):
            match = index.lookup(max_tokens)
            length, continuations = _brute_force([], stream, max_tokens)
            assert match.length == length, (stream, max_tokens)
            assert match.continuation in continuations, (stream, match)
    assert len(index) == len(stream) and index.num_states <= 2 * len(stream)


def test_sessions_of_several_streams_match_brute_force():
    rng = random.Random(7)
    index = SuffixIndex()
    finished: list[list[int]] = []
    current: list[int] = []
    for _ in range(12):
        # a new call: either the next turn (the previous stream, maybe cut, plus new tokens) or a fresh prompt
        if current and rng.random() < 0.7:
            prompt = current[: rng.randint(0, len(current))] + [rng.randrange(4) for _ in range(rng.randint(0, 6))]
        else:
            prompt = [rng.randrange(4) for _ in range(rng.randint(1, 12))]
        if current:
            finished.append(current)
        reused = index.start_stream(prompt)
        common = 0
        while common < min(len(prompt), len(current)) and prompt[common] == current[common]:
            common += 1
        assert reused == common
        current = list(prompt)
        for _ in range(rng.randint(1, 6)):
            if current:
                match = index.lookup(5)
                length, continuations = _brute_force(finished, current, 5)
                assert match.length == length, (finished, current)
                assert match.continuation in continuations, (finished, current, match)
            chunk = [rng.randrange(4) for _ in range(rng.randint(1, 3))]
            index.append(chunk)
            current += chunk
        assert index.stream_length == len(current)


def test_lookup_on_an_empty_index_and_a_new_token():
    index = SuffixIndex()
    assert index.lookup(4) == (0, [])
    index.append([5, 6, 7])
    assert index.lookup(4) == (0, [])  # 7 never occurred before
    index.append([5])
    assert index.lookup(4) == (1, [6, 7, 5])  # 5 occurred at 0; what followed it there, up to the stream's end
    index.append([6])
    assert index.lookup(0) == (0, [])
    assert index.lookup(1) == (2, [7])


def test_a_repeated_prompt_reuses_its_index_and_predicts_the_earlier_reply():
    index = SuffixIndex()
    index.start_stream([1, 2, 3, 4])
    index.append([9, 8, 7])  # the first call's reply
    assert index.start_stream([1, 2, 3, 4]) == 4  # the same prompt again: nothing new indexed
    assert index.stream_length == 4 and len(index) == 7
    assert index.lookup(3) == (4, [9, 8, 7])
    assert index.start_stream([1, 2, 3, 4, 9, 8, 7, 6]) == 7  # the next turn: only the new token is indexed
    assert len(index) == 8


def test_draft_session_is_per_thread_and_validates():
    with pytest.raises(ValueError, match="min_match=0"):
        DraftSession(min_match=0)
    session = DraftSession(min_match=3)
    assert DraftSession.current() is None
    with session:
        assert DraftSession.current() is session
        with session:  # re-entering on the same thread is fine
            assert DraftSession.current() is session
        errors = []

        def other_thread():
            assert DraftSession.current() is None  # the session is not active on other threads
            try:
                with session:
                    pass
            except RuntimeError as error:
                errors.append(str(error))

        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        assert errors and "already active on another thread" in errors[0]
    assert DraftSession.current() is None
    with session:  # free again once left
        pass


def test_sessions_are_seen_by_every_copy_of_the_module(tmp_path):
    """A trust_remote_code copy of suffix_index.py (another module object) sees the package's active session."""
    import importlib
    import sys
    from pathlib import Path

    import dlite_hf.modeling.suffix_index as package_copy

    # as trust_remote_code lays it out: the file and the files it imports, in a package of their own
    folder = tmp_path / "remote_copy"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    for name in ("suffix_index.py", "decoding_options.py"):
        (folder / name).write_text((Path(package_copy.__file__).parent / name).read_text())
    sys.path.insert(0, str(tmp_path))
    try:
        other = importlib.import_module("remote_copy.suffix_index")
    finally:
        sys.path.remove(str(tmp_path))
    assert other.DraftSession is not DraftSession
    with DraftSession() as session:
        assert other.DraftSession.current() is session
    assert other.DraftSession.current() is None
