"""Every error MemForest raises on purpose derives from MemForestError; `redact` and `shown` keep
secrets and huge values out of messages and logs."""

import re

_SECRETS = re.compile(
    r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?)(?:(?:bearer|basic|token|digest)\s+)?[^\s,;'\"}]+"  # a header/field
    r"|\bbearer\s+[A-Za-z0-9._~+/=-]{8,}"  # a bearer token anywhere
    r"|\bsk-[A-Za-z0-9_-]{8,}"  # OpenAI-style keys
    r"|(?i:(api[_-]?key['\"]?\s*[:=]\s*['\"]?))[A-Za-z0-9._~+/=-]{8,}"  # api_key=..., "api-key": "..."
)
_MAX_SHOWN = 80


def redact(text: str) -> str:
    """`text` with credentials (Authorization headers, bearer tokens, sk- keys, api keys) replaced."""
    def hide(match: re.Match[str]) -> str:
        prefix = match.group(1) or match.group(2) or ""
        return f"{prefix}[redacted]"

    return _SECRETS.sub(hide, text)


def shown(value: object, limit: int = _MAX_SHOWN) -> str:
    """A value as an error message shows it: its repr, cut to a readable length."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class MemForestError(Exception):
    """Base class: a clear, user-facing message; the store is unchanged."""


class InputError(MemForestError):
    """Malformed session, turn, identifier or option."""


class StoreError(MemForestError):
    """The store is missing, locked, or fails its invariants."""


class ModelError(MemForestError):
    """A model call failed after its retries (timeout, server error, invalid output)."""


class ConfigError(MemForestError):
    """A configuration cannot be built (unknown backend, missing package, bad value)."""
