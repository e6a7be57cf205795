"""The broker's network layer: listeners, connections, request frames in and answers out.

- ``acceptor``: listening sockets, accepting with back-off when out of file descriptors, TLS handshakes;
- ``framing``: size-prefixed request frames cut out of received bytes, large ones received in place;
- ``memory_pool``: the broker-wide budget of received, unhandled request bytes;
- ``response_queue``: a connection's answers in request order, gathered into few writes;
- ``file_region``: fetched log bytes sent with sendfile (or copied through TLS);
- ``connection``: one client connection (sessions, SASL, quotas, flow control, request metrics);
- ``socket_server``: every connection, the limits and security settings they share, the idle sweep.

The network layer knows no API's semantics: handlers say through KafkaApis which APIs' answers may be
gathered (``GATHER_RESPONSES``), and an answer that completes later is a DeferredResponse.
"""

from strom.broker.network.connection import KafkaConnection
from strom.broker.network.file_region import read_file_region, send_file_region
from strom.broker.network.memory_pool import RequestMemoryPool
from strom.broker.network.socket_server import SocketServer

__all__ = ["KafkaConnection", "RequestMemoryPool", "SocketServer", "read_file_region", "send_file_region"]
