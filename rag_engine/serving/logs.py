"""What the service's logs may say: uvicorn's access log writes a request's path, never its query
string (a client may put a key in ``?key=``; the request is refused, but the line would keep it)."""

from __future__ import annotations

import logging

QUERY_OMITTED = "?[query omitted]"


class PathOnly(logging.Filter):
    """Rewrites uvicorn's access line (``'%s - "%s %s HTTP/%s" %d'``: client, method, path with
    query, version, status) so the path carries no query string; other records pass unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str) and "?" in args[2]:
            record.args = (*args[:2], args[2].split("?", 1)[0] + QUERY_OMITTED, *args[3:])
        return True


PATH_ONLY = PathOnly()
