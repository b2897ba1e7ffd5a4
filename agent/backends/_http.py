"""What the HTTP backends share: how long connecting and answering may take, and the timeout error."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import BackendTimeout

if TYPE_CHECKING:  # httpx is imported by the backends that use it, not by the settings that read this
    import httpx

# A dead or firewalled host should fail fast even though a generation may take minutes.
CONNECT_TIMEOUT = 10.0


def client_timeout(seconds: float) -> httpx.Timeout:
    """`seconds` for a whole request, of which at most CONNECT_TIMEOUT for the connection."""
    import httpx

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


def describe_error(exc: httpx.HTTPError) -> str:
    """A short text for a transport error (httpx messages can be empty)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def error_message(response: httpx.Response) -> str:
    """The error text inside an error answer, whatever the server's JSON shape."""
    try:
        payload = response.json()
    except ValueError:
        return response.text.strip()[:300] or response.reason_phrase
    if isinstance(payload, dict):
        error = payload.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        for candidate in (error, payload.get("message"), payload.get("detail")):
            if candidate:
                return str(candidate)
    return str(payload)[:300]
