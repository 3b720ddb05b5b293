"""A loopback TCP proxy a test can cut: the store "stops" mid-run without stopping the shared one.

Connections to ``proxy.port`` are forwarded to the target; ``cut()`` closes the listener and
every open connection, so the next connect is refused, as with a stopped server; ``restore()``
listens on the same port again, as with a server that came back.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpProxy:
    def __init__(self, target_host: str, target_port: int):
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self._cut = threading.Event()
        self._listen(self._listener)

    def _listen(self, listener: socket.socket) -> None:
        threading.Thread(target=self._accept, args=(listener,), name="tcp-proxy", daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # closed by cut()
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                if self._cut.is_set() or listener is not self._listener:
                    client.close()
                    upstream.close()
                    return
                self._open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Refuse new connections and drop the open ones."""
        with self._lock:
            self._cut.set()
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() blocked on it
            self._listener.close()
            for s in self._open:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            self._open.clear()

    def restore(self) -> None:
        """Listen on the same port again after ``cut()``: new connections reach the target."""
        with self._lock:
            if not self._cut.is_set():
                return
            self._listener = socket.create_server(("127.0.0.1", self.port))  # SO_REUSEADDR on POSIX
            self._cut.clear()
            self._listen(self._listener)

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._cut.is_set():
            self.cut()
