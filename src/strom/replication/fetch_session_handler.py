"""The fetcher's half of an incremental fetch session (KIP-227) with one leader.

After a full fetch opened a session, each fetch names only the partitions whose fetch state
changed (fetch offset, log start offset, leader epoch ...) and the ones dropped since; the
leader answers only partitions with news. An idle follower's fetch then carries no partitions.
Any doubt about what the leader holds (an error, a lost answer) starts over with a full fetch.
"""

from __future__ import annotations

import kafka.errors as Errors

from strom.protocol.replica_fetch import FetchPartition
from strom.server_common.types import TopicPartition

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
_MAX_EPOCH = 0x7FFFFFFF
_SESSION_GONE = Errors.FetchSessionIdNotFoundError.errno


class FetchSessionHandler:
    """Builds session fetches for one leader and follows its answers (Kafka's FetchSessionHandler)."""

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH  # 0: the next fetch is full (and asks for a session)
        self._sent: dict[TopicPartition, FetchPartition] = {}  # what the leader's session holds
        self._next: dict[TopicPartition, FetchPartition] = {}  # what it holds once the fetch in flight is answered

    def build(self, wanted: dict[TopicPartition, FetchPartition]
              ) -> tuple[int, int, dict[str, list[FetchPartition]], dict[str, list[int]]]:
        """(session id, epoch, partitions to send by topic, partitions to forget by topic)."""
        self._next = dict(wanted)
        topics: dict[str, list[FetchPartition]] = {}
        forgotten: dict[str, list[int]] = {}
        full = self.epoch == INITIAL_EPOCH
        for tp, fp in wanted.items():
            if full or self._sent.get(tp) != fp:
                topics.setdefault(tp[0], []).append(fp)
        if not full:
            for tp in self._sent:
                if tp not in wanted:
                    forgotten.setdefault(tp[0], []).append(tp[1])
        return self.session_id, self.epoch, topics, forgotten

    def handle_response(self, error_code: int, session_id: int) -> bool:
        """Follow the answer to the last built fetch; False when it failed (the next fetch is full)."""
        if error_code:
            self.reset(keep_id=error_code != _SESSION_GONE)
            return False
        if self.epoch == INITIAL_EPOCH:
            self.session_id = session_id  # 0: no slot on the leader; the next fetch is full again
            self.epoch = 1 if session_id != INVALID_SESSION_ID else INITIAL_EPOCH
        else:
            self.epoch = 1 if self.epoch >= _MAX_EPOCH else self.epoch + 1
        self._sent = self._next
        return True

    def reset(self, keep_id: bool = True) -> None:
        """Start over with a full fetch; keeping the id asks the leader to replace that session."""
        if not keep_id:
            self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self._sent = {}
