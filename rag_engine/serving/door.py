"""The service's door: what every HTTP request passes before the app reads a byte of its body.

In order: more than one ``Authorization`` header is 400 (one reading of the key everywhere); a
path other than the public ones (health, the API docs) needs a valid key, checked from the
headers alone (401 before the body is read, the connection closed if a body was announced);
``GET /mcp`` is 405 (the MCP endpoint is stateless: a server-to-client stream would carry
nothing and hold a connection); a body over ``max_body_bytes`` is 413, by its Content-Length or
as it arrives; a body not received whole within ``body_timeout_seconds`` is 408 and the
connection closed. The body is then handed to the app as one message. The authenticated
principal is left in the request's state (``principal``) for the refusal records.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rag_engine.errors import Unauthenticated
from rag_engine.governance.principals import Principal, PrincipalRegistry
from rag_engine.serving.wire import bearer, first_line

PUBLIC_PATHS = frozenset({"/v1/health", "/docs", "/openapi.json"})
PUBLIC_PREFIXES = ("/static/docs/",)
MCP_PATHS = frozenset({"/mcp", "/mcp/"})

Refused = Callable[[Scope, int, str, Principal | None], Awaitable[None]]
"""Called after a refusal is answered: (scope, status, error type, principal if authenticated)."""


def refusal(status: int, error: str, detail: str, *, close: bool, headers: dict[str, str] | None) -> JSONResponse:
    """The one-line error body; ``close``: the connection ends after it (a body was left unread)."""
    extra = dict(headers or {})
    if status == 401:
        extra["WWW-Authenticate"] = "Bearer"
    if close:
        extra["Connection"] = "close"
    return JSONResponse({"error": error, "detail": detail}, status, headers=extra)


class Door:
    def __init__(
        self,
        app: ASGIApp,
        registry: PrincipalRegistry,
        *,
        max_body_bytes: int,
        body_timeout: float,
        refused: Refused | None = None,
    ):
        self.app, self.registry = app, registry
        self.limit, self.body_timeout, self.refused = max_body_bytes, body_timeout, refused

    async def _refuse(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        status: int,
        error: str,
        detail: str,
        *,
        principal: Principal | None = None,
        close: bool = True,
        headers: dict[str, str] | None = None,
    ) -> None:
        if self.refused is not None:  # on the record before the caller hears of it
            await self.refused(scope, status, error, principal)
        await refusal(status, error, detail, close=close, headers=headers)(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: list[tuple[bytes, bytes]] = list(scope.get("headers") or ())
        authorization = [v for k, v in headers if k.lower() == b"authorization"]
        length_header = [v for k, v in headers if k.lower() == b"content-length"]
        chunked = any(k.lower() == b"transfer-encoding" for k, _ in headers)
        body_pending = chunked or any(v.strip() not in (b"", b"0") for v in length_header)
        path: str = scope.get("path", "")
        if len(authorization) > 1:
            detail = "more than one Authorization header: send exactly one"
            await self._refuse(scope, receive, send, 400, "BadRequest", detail, close=body_pending)
            return
        principal: Principal | None = None
        if path not in PUBLIC_PATHS and not path.startswith(PUBLIC_PREFIXES):
            key = bearer(authorization[0].decode("latin-1")) if authorization else None
            try:
                principal = self.registry.authenticate(key)
            except Unauthenticated as exc:
                await self._refuse(scope, receive, send, 401, type(exc).__name__, first_line(exc), close=body_pending)
                return
            scope.setdefault("state", {})["principal"] = principal
        if path in MCP_PATHS and scope.get("method") == "GET":
            detail = "the MCP endpoint is stateless: POST a JSON-RPC message (no server-to-client stream)"
            allow = {"Allow": "POST, DELETE"}
            await self._refuse(
                scope, receive, send, 405, "MethodNotAllowed", detail, principal=principal, close=False, headers=allow
            )
            return
        too_large = f"the request body is over {self.limit} bytes (serving.limits.max_body_bytes)"
        if any(v.isdigit() and int(v) > self.limit for v in length_header):
            await self._refuse(scope, receive, send, 413, "RequestTooLarge", too_large, principal=principal)
            return
        chunks: list[bytes] = []
        try:
            async with asyncio.timeout(self.body_timeout):
                seen, more = 0, True
                while more:
                    message = await receive()
                    if message["type"] != "http.request":  # the client went away
                        return
                    chunks.append(message.get("body", b""))
                    seen += len(chunks[-1])
                    if seen > self.limit:
                        await self._refuse(scope, receive, send, 413, "RequestTooLarge", too_large, principal=principal)
                        return
                    more = message.get("more_body", False)
        except TimeoutError:
            detail = f"the request body did not arrive within {self.body_timeout:g} s"
            detail += " (serving.limits.body_timeout_seconds)"
            await self._refuse(scope, receive, send, 408, "BodyTimeout", detail, principal=principal)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        await self.app(scope, replay, send)
