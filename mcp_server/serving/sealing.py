"""Text sealed for one caller and a while: tokens a client carries back that it may not read or forge.

The SDK's request-state codec (AES-256-GCM, mcp.server.request_state) under a key of our own,
derived from --request-state-key-env's secret (so every process behind one address opens the
others' tokens) or made by this process, per purpose: a token sealed for one purpose, or as the
SDK's request state, never opens as another. Each token names its owner (a token's name) and
its expiry inside the sealed text.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time
from typing import Any

from mcp.server.request_state import AESGCMRequestStateCodec, InvalidRequestState

from ..config.server_settings import ServerSettings

# The tokens the server seals: the answer view's choice (answer/asking.py).
VIEW_CHOICE_PURPOSE = "sqale-mcp/answer-view-choice/v1"
VIEW_CHOICE_SECONDS = 3_600.0  # how long the view may still offer the choice


class Sealer:
    """Seals text for an owner until `ttl` seconds from now, for one purpose."""

    def __init__(self, secret: bytes, purpose: str, ttl: float) -> None:
        self._purpose = purpose
        self._codec = AESGCMRequestStateCodec([hmac.new(secret, purpose.encode(), hashlib.sha256).digest()])
        self._ttl = ttl

    @classmethod
    def from_settings(cls, settings: ServerSettings, purpose: str = VIEW_CHOICE_PURPOSE,
                      ttl: float = VIEW_CHOICE_SECONDS) -> Sealer:
        """Under --request-state-key-env's key, else a key this process makes."""
        key = settings.request_state_key
        return cls(key.get_secret_value().encode() if key is not None else os.urandom(32), purpose, ttl)

    def seal(self, text: str, owner: str) -> str:
        """`text` for `owner`, until the ttl runs out."""
        payload = {"purpose": self._purpose, "owner": owner, "exp": time.time() + self._ttl, "text": text}
        return self._codec.seal(json.dumps(payload).encode())

    def unseal(self, token: str, owner: str) -> str | None:
        """The text `token` holds when this sealer sealed it for `owner` and it has not expired."""
        try:
            payload: Any = json.loads(self._codec.unseal(token))
        except (InvalidRequestState, ValueError):
            return None
        if not isinstance(payload, dict) or payload.get("purpose") != self._purpose:
            return None
        exp, sealed_for, text = payload.get("exp"), payload.get("owner"), payload.get("text")
        if not isinstance(exp, int | float) or not time.time() < exp or not isinstance(text, str):
            return None
        if not isinstance(sealed_for, str) or not hmac.compare_digest(sealed_for.encode(), owner.encode()):
            return None
        return text
