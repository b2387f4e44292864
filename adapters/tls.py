"""One TLS context for every HTTP client of the process (the Bot API's two, the model's, speech to
text's), instead of one each: each loads the whole CA bundle, about 0.8 MiB resident apiece."""

from __future__ import annotations

import functools
import ssl


@functools.cache
def shared_ssl_context() -> ssl.SSLContext:
    """httpx's default verifying context (certifi's CAs, or SSL_CERT_FILE / SSL_CERT_DIR), the one
    each client would build for itself; built once, at the first client."""
    import httpx

    return httpx.create_ssl_context()
