"""The HTTP edge: what stands between a socket and the API handlers, and
nothing of any API's meaning.

`guard` (read deadlines and header limits in uvicorn's protocol),
`body_limit` (413 as the bytes arrive), `disconnect` (a client that leaves
cancels its handler), `ratelimit_headers` (x-ratelimit-*), `context` (the
typed per-request context), `errors` (the error envelope), `sse` (framing
typed objects as server-sent events), `openapi` (the published schema),
`listeners` (the admin port's dispatch and socket binding), `asgi` (the
shape of its middlewares).
"""
