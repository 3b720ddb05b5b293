"""The query service: the query path over HTTP for applications, keyed on authenticated principals.

- ``app``: the FastAPI application (``/v1/health``, ``/v1/retrieve``, ``/v1/query``, OpenAPI)
"""
