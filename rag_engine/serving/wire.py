"""What the HTTP routes and the MCP tools both read from and write to the wire: the key of a
request's ``Authorization: Bearer`` header, and the one line an error is answered with."""

from __future__ import annotations


def bearer(authorization: str | None) -> str | None:
    """The key of an ``Authorization: Bearer <key>`` header; None for none or another scheme."""
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def first_line(exc: BaseException) -> str:
    """The first line of an error's message: what a response or a tool result carries."""
    return str(exc).split("\n")[0]
