"""A suffix automaton over the token ids of a session: the retrieval half of hybrid drafting.

`SuffixIndex` is a generalized suffix automaton (Blumer et al.) over every token stream it was given: appending a
token costs amortized O(1), and finding the longest earlier occurrence of the stream's suffix O(1) plus the
continuation read back, whatever the context length. A stream that repeats a prefix of the current one (the next
turn of a chat) indexes only its new tokens.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from .decoding_options import check_min_match


class LookupMatch(NamedTuple):
    """The longest earlier occurrence of the current stream's suffix, and what followed it there."""

    length: int  # tokens of the matched suffix (0: no earlier occurrence)
    continuation: list[int]  # tokens that followed its earliest occurrence, at most the number asked for


class SuffixIndex:
    """Generalized suffix automaton with first-occurrence positions, grown one token at a time.

    Per state: `_len` (its longest substring), `_link` (suffix link), `_next` (token -> state) and `_first` (flat
    index of the end of its earliest occurrence). `_run_start` marks where a stream's own tokens begin in the flat
    array `_tokens`, so a continuation is never read across two unrelated runs.
    """

    def __init__(self) -> None:
        self._len: list[int] = [0]
        self._link: list[int] = [-1]
        self._next: list[dict[int, int]] = [{}]
        self._first: list[int] = [-1]
        self._tokens: list[int] = []
        self._run_start = bytearray()
        self._stream_states: list[int] = []  # automaton state after each token of the current stream
        self._stream_flat: list[int] = []  # flat index of each token of the current stream

    def __len__(self) -> int:
        """Tokens indexed (over all streams)."""
        return len(self._tokens)

    @property
    def num_states(self) -> int:
        return len(self._len)

    @property
    def stream_length(self) -> int:
        """Tokens of the current stream (the one `append` extends and `lookup` matches)."""
        return len(self._stream_states)

    def _new_state(self, length: int, link: int, nxt: dict[int, int], first: int) -> int:
        self._len.append(length)
        self._link.append(link)
        self._next.append(nxt)
        self._first.append(first)
        return len(self._len) - 1

    def _clone(self, p: int, q: int, token: int) -> int:
        """Split state `q` at length `len(p) + 1`; redirect the transitions on `token` from `p` up its links."""
        clone = self._new_state(self._len[p] + 1, self._link[q], dict(self._next[q]), self._first[q])
        while p != -1 and self._next[p].get(token) == q:
            self._next[p][token] = clone
            p = self._link[p]
        self._link[q] = clone
        return clone

    def _extend(self, last: int, token: int, flat: int) -> int:
        nxt = self._next
        q = nxt[last].get(token)
        if q is not None:  # this extension already exists (another stream): reuse or split its state
            if self._len[q] == self._len[last] + 1:
                return q
            return self._clone(last, q, token)
        cur = self._new_state(self._len[last] + 1, 0, {}, flat)
        p = last
        while p != -1 and token not in nxt[p]:
            nxt[p][token] = cur
            p = self._link[p]
        if p != -1:
            q = nxt[p][token]
            if self._len[p] + 1 == self._len[q]:
                self._link[cur] = q
            else:
                self._link[cur] = self._clone(p, q, token)
        return cur

    def append(self, tokens: Iterable[int]) -> None:
        """Index `tokens` as the continuation of the current stream (amortized O(1) per token)."""
        last = self._stream_states[-1] if self._stream_states else 0
        new_run = not self._stream_flat or self._stream_flat[-1] != len(self._tokens) - 1
        for token in tokens:
            token = int(token)
            flat = len(self._tokens)
            self._tokens.append(token)
            self._run_start.append(1 if new_run else 0)
            new_run = False
            last = self._extend(last, token, flat)
            self._stream_states.append(last)
            self._stream_flat.append(flat)

    def start_stream(self, tokens: Sequence[int]) -> int:
        """Make `tokens` the current stream; index only what follows its longest common prefix with the current
        stream (for a new turn whose prompt repeats the last one). Returns the number of tokens reused."""
        tokens = [int(t) for t in tokens]
        old = self._stream_flat
        common = 0
        limit = min(len(tokens), len(old))
        while common < limit and self._tokens[old[common]] == tokens[common]:
            common += 1
        del self._stream_states[common:]
        del self._stream_flat[common:]
        if common == len(old) and old:  # the whole stream matched: follow the run it ended in, while it agrees
            flat = old[-1] + 1
            while (
                common < len(tokens)
                and flat < len(self._tokens)
                and not self._run_start[flat]
                and self._tokens[flat] == tokens[common]
            ):
                # a prefix of a stream is the longest string of its state, so this transition is its position
                self._stream_states.append(self._next[self._stream_states[-1]][tokens[common]])
                self._stream_flat.append(flat)
                common += 1
                flat += 1
        self.append(tokens[common:])
        return common

    def lookup(self, max_tokens: int) -> LookupMatch:
        """The longest suffix of the current stream that also ends at an earlier position, and up to `max_tokens`
        tokens that followed its earliest occurrence (within that occurrence's run). `(0, [])` if none."""
        if not self._stream_states or max_tokens <= 0:
            return LookupMatch(0, [])
        state, here = self._stream_states[-1], self._stream_flat[-1]
        if self._first[state] == here and (here + 1 == len(self._tokens) or self._run_start[here + 1]):
            # the stream's suffix first occurs right here, with nothing after it: its longest repeated part.
            # (A stream that re-uses an earlier one's tokens ends at an old position; what followed there counts.)
            state = self._link[state]
        length = min(self._len[state], len(self._stream_states))
        if length == 0:
            return LookupMatch(0, [])
        end = self._first[state]
        stop = min(len(self._tokens), end + 1 + max_tokens)
        run_end = self._run_start.find(1, end + 1, stop)  # never read into the next run
        return LookupMatch(length, self._tokens[end + 1 : stop if run_end == -1 else run_end])


def _active_sessions() -> list:
    """This thread's stack of entered sessions. It lives on the thread object, not on the class, so every copy of
    this file (the installed package's and a trust_remote_code copy beside a checkpoint) sees the same sessions."""
    return vars(threading.current_thread()).setdefault("_dlite_draft_sessions", [])


class DraftSession:
    """The token `index` (a :class:`SuffixIndex`) of one agent session, shared by the hybrid-drafting `generate()`
    calls made inside ``with session:`` (each call's prompt and output stay indexed for the next), and the statistics
    of the last of them (`last_generation_stats`). `min_match` overrides the drafter config's `lookup_min_match`."""

    def __init__(self, min_match: int | None = None):
        if min_match is not None:
            check_min_match(min_match, f"DraftSession(min_match={min_match!r}) (or None for the drafter's default)")
        self.min_match = min_match
        self.index = SuffixIndex()
        self.last_generation_stats = None
        self._owner: int | None = None  # the thread the session is entered on
        self._depth = 0
        self._guard = threading.Lock()

    def __enter__(self) -> DraftSession:
        me = threading.get_ident()
        with self._guard:
            if self._owner not in (None, me):
                raise RuntimeError(
                    "This DraftSession is already active on another thread. A session indexes one conversation, "
                    "one generate() call at a time: give each concurrent conversation its own DraftSession."
                )
            self._owner = me
            self._depth += 1
        _active_sessions().append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        stack = _active_sessions()
        if not stack or stack[-1] is not self:
            raise RuntimeError("DraftSession contexts were exited out of order.")
        stack.pop()
        with self._guard:
            self._depth -= 1
            if self._depth == 0:
                self._owner = None

    @classmethod
    def current(cls) -> DraftSession | None:
        """The innermost session entered on this thread, or None."""
        stack = _active_sessions()
        return stack[-1] if stack else None
