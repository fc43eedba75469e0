"""A TCP proxy on loopback that a test can make silent: connections stay open but no
byte goes through, as with a database host that stopped answering (a network partition,
a frozen server), without touching the shared server itself."""

from __future__ import annotations

import selectors
import socket
import threading
from types import TracebackType

#: How often a stalled pump looks whether it may go on.
STALL_POLL_S = 0.01


class SilentableProxy:
    """Forwards 127.0.0.1:``port`` to ``target``; :meth:`silence` stops every byte (new
    connections are accepted and hang), :meth:`resume` lets them through again."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = [self._listener]
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()

    def silence(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def close(self) -> None:
        self._closed.set()
        self._flowing.set()
        for sock in list(self._sockets):
            sock.close()

    def __enter__(self) -> SilentableProxy:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._pump, args=(client,), daemon=True).start()

    def _pump(self, client: socket.socket) -> None:
        self._sockets.append(client)
        try:
            server = socket.create_connection(self._target)
        except OSError:
            client.close()
            return
        self._sockets.append(server)
        peers = {client: server, server: client}
        with selectors.DefaultSelector() as selector:
            for sock in peers:
                selector.register(sock, selectors.EVENT_READ)
            while not self._closed.is_set():
                if not self._flowing.wait(STALL_POLL_S):
                    continue  # silent: what was sent waits in the kernel's buffers
                for key, _ in selector.select(STALL_POLL_S):
                    try:
                        data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                        if not data:
                            raise OSError("closed")
                        peers[key.fileobj].sendall(data)  # type: ignore[index]
                    except OSError:
                        client.close()
                        server.close()
                        return
