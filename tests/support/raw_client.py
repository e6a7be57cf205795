"""A bare Kafka-framing socket client, to send what real clients never would."""

from __future__ import annotations

import socket
import struct

from tests.support.broker import BrokerProcess


class RawClient:
    """A bare socket speaking Kafka framing, to send what real clients never would."""

    def __init__(self, broker: BrokerProcess, port: int | None = None, client_id: str = "raw") -> None:
        self.sock = socket.create_connection(("127.0.0.1", port or broker.port), timeout=10)
        self.correlation = 0
        self.client_id = client_id

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request(self, req, version: int):  # noqa: ANN001, ANN201
        self.correlation += 1
        req.with_header(correlation_id=self.correlation, client_id=self.client_id)
        self.send_raw(bytes(req.encode(version=version, header=True, framed=True)))
        return self.read_frame()

    def read_frame(self) -> bytes:
        size = struct.unpack(">i", self._read(4))[0]
        return self._read(size)

    def _read(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed by broker")
            buf += chunk
        return buf

    def is_closed_by_peer(self) -> bool:
        self.sock.settimeout(10)
        try:
            return self.sock.recv(1) == b""
        except ConnectionError:
            return True

    def close(self) -> None:
        self.sock.close()


def decode(resp_cls, frame: bytes, version: int, flexible_header: bool):  # noqa: ANN001, ANN201
    body = frame[5:] if flexible_header else frame[4:]
    return resp_cls.decode(body, version=version)
