"""What the HTTP backends share: how long connecting and answering may take, and the timeout error."""

from __future__ import annotations

import httpx

from ..errors import BackendTimeout

# A dead or firewalled host should fail fast even though a generation may take minutes.
CONNECT_TIMEOUT = 10.0


def client_timeout(seconds: float) -> httpx.Timeout:
    """`seconds` for a whole request, of which at most CONNECT_TIMEOUT for the connection."""
    return httpx.Timeout(seconds, connect=min(seconds, CONNECT_TIMEOUT))


def timed_out(server: str, seconds: float, model: str, likely_cause: str) -> BackendTimeout:
    """The error for `server` not answering within `seconds`; `likely_cause` continues the sentence."""
    return BackendTimeout(
        f"{server} did not answer within {seconds:g} s (model '{model}'){likely_cause}: retry, "
        "or give the backend a longer timeout."
    )


def is_http_url(url: str) -> bool:
    """True when `url` starts with http:// or https://, as every base URL must."""
    return url.startswith(("http://", "https://"))
