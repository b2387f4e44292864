"""`python -m bot.healthcheck`: the Dockerfile's HEALTHCHECK. GET /livez of the HTTP service; exit 0 when
it answers 200, 1 otherwise (and 0 when COMPANION_HTTP_PORT turns the service off: nothing to ask).

Standard library only (and core/values/addresses.py, which is too), so that a check every 30 seconds costs a bare interpreter and no curl is
needed in the image. It reads the environment (as Docker passes the settings), not `.env`; the Host
header it sends is one the service answers to (the first of COMPANION_HTTP_ALLOWED_HOSTS, else
localhost).
"""

from __future__ import annotations

import http.client
import os
import sys

from core.values.addresses import is_wildcard  # standard library only, like this module

TIMEOUT = 5.0


def main() -> int:
    port = os.environ.get("COMPANION_HTTP_PORT", "8765").strip().lower()
    if port in {"0", "off", "none", "false"}:
        return 0
    if not port.isdigit():
        print(f"healthcheck: COMPANION_HTTP_PORT={port!r} is not a port", file=sys.stderr)
        return 1
    host = os.environ.get("COMPANION_HTTP_HOST", "127.0.0.1").strip() or "127.0.0.1"
    if is_wildcard(host):  # listening everywhere: ask over loopback
        host = "::1" if ":" in host else "127.0.0.1"
    allowed = [h.strip() for h in os.environ.get("COMPANION_HTTP_ALLOWED_HOSTS", "").split(",") if h.strip()]
    name = allowed[0] if allowed else "localhost"
    connection = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=TIMEOUT)
    try:
        # As written: an allowed name without a port is answered on any port.
        connection.request("GET", "/livez", headers={"Host": name})
        status = connection.getresponse().status
    except OSError as exc:
        print(f"healthcheck: no answer from port {port} ({type(exc).__name__})", file=sys.stderr)
        return 1
    finally:
        connection.close()
    if status != 200:
        print(f"healthcheck: /livez answered {status}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
