"""`rag mcp` over stdio: tool calls still running when stdin closes are finished, within a bound.

The SDK's stdio loop cancels every handler in flight when its input ends and answers them
"Connection closed"; but an agent may write its calls and close stdin while it still reads
stdout, so a search it had sent was dropped. ``serve_stdio`` sets a gate between the transport
and the server: it notes the id of each request read and of each answer written, and holds the
end of input back until every request read has its answer, or ``grace_s`` has passed (then the
SDK answers the rest "Connection closed", as before). A request the client cancelled
(``notifications/cancelled``) is not waited for.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCError, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse


class Unanswered:
    """Ids of the requests read and not answered yet."""

    def __init__(self) -> None:
        self.ids: set[Any] = set()
        self._changed = anyio.Event()

    def add(self, request_id: Any) -> None:
        self.ids.add(request_id)

    def answered(self, request_id: Any) -> None:
        self.ids.discard(request_id)
        self._changed.set()

    async def drained(self, grace_s: float) -> None:
        """Until every request read is answered, at most ``grace_s`` seconds."""
        with anyio.move_on_after(grace_s):
            while self.ids:
                self._changed = anyio.Event()
                await self._changed.wait()


class _Stream:
    def __init__(self, inner: Any, unanswered: Unanswered) -> None:
        self._inner, self._unanswered = inner, unanswered

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        await self.aclose()
        return None


class HeldInput(_Stream):
    """The read side: notes requests; its end comes once they are answered (or the grace is over)."""

    def __init__(self, inner: Any, unanswered: Unanswered, grace_s: float) -> None:
        super().__init__(inner, unanswered)
        self._grace_s = grace_s

    @property
    def last_context(self) -> Any:  # the sender's context the SDK restores per message
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        try:
            item = await self._inner.receive()
        except anyio.EndOfStream:
            await self._unanswered.drained(self._grace_s)
            raise
        message = item.message if isinstance(item, SessionMessage) else None
        if isinstance(message, JSONRPCRequest):
            self._unanswered.add(message.id)
        elif isinstance(message, JSONRPCNotification) and message.method == "notifications/cancelled":
            self._unanswered.answered((message.params or {}).get("requestId"))
        return item

    def __aiter__(self) -> HeldInput:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> HeldInput:
        return self


class NotedOutput(_Stream):
    """The write side: each answer (result or error) crosses its request off once handed on."""

    async def send(self, item: Any) -> None:
        await self._inner.send(item)
        if isinstance(item, SessionMessage) and isinstance(item.message, (JSONRPCResponse, JSONRPCError)):
            self._unanswered.answered(item.message.id)

    async def __aenter__(self) -> NotedOutput:
        return self


async def serve_stdio(server: MCPServer, grace_s: float) -> None:
    """``server`` over this process's stdin and stdout, its calls in flight finished at end of input."""
    low = server._lowlevel_server  # mcp==2.3.0 (pinned): the way to run its loop on other streams
    unanswered = Unanswered()
    async with stdio_server() as (read_stream, write_stream):
        await low.run(
            HeldInput(read_stream, unanswered, grace_s),
            NotedOutput(write_stream, unanswered),
            low.create_initialization_options(),
        )
