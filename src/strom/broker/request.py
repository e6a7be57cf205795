"""What a handler gets besides the decoded request: who asked, and the broker's services."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strom.protocol.codec import RequestHeader

if TYPE_CHECKING:
    from strom.broker.server import KafkaServer


@dataclass(slots=True)
class FileRegion:
    """A byte range of an open file, written to the socket with sendfile (zero copy)."""

    file: Any
    position: int
    size: int


@dataclass(slots=True)
class RawResponse:
    """A response body a handler encoded itself: bytes and file regions, in order."""

    parts: list[bytes | FileRegion]

    @property
    def size(self) -> int:
        return sum(len(p) if isinstance(p, bytes | bytearray | memoryview) else p.size for p in self.parts)


@dataclass(slots=True)
class RequestContext:
    header: RequestHeader
    server: KafkaServer
    client_host: str

    @property
    def version(self) -> int:
        return self.header.api_version
