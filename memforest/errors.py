"""Every error MemForest raises on purpose derives from MemForestError; `redact` and `shown` keep
secrets and huge values out of messages and logs."""

from __future__ import annotations

import json
import os
import re
import threading
from urllib.parse import quote

_SECRETS = re.compile(
    # a header/field
    r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?)(?:(?:bearer|basic|token|digest)\s+)?[^\s,;'\"}]+"
    r"|\bbearer\s+[A-Za-z0-9._~+/=-]{8,}"  # a bearer token anywhere
    r"|(?i:(api[_-]?key['\"]?\s*[:=]\s*['\"]?))[A-Za-z0-9._~+/=-]{8,}"  # api_key=..., "api-key": "..."
    # keys by their providers' shapes: OpenAI/Anthropic, Groq, Hugging Face, Google, xAI, GitHub, AWS
    r"|\bsk-[A-Za-z0-9_-]{8,}|\bgsk_[A-Za-z0-9]{16,}|\bhf_[A-Za-z0-9]{16,}|\bAIza[0-9A-Za-z_-]{30,}"
    r"|\bxai-[A-Za-z0-9]{16,}|\bgh[pousr]_[A-Za-z0-9]{30,}|\bgithub_pat_[A-Za-z0-9_]{30,}|\bAKIA[0-9A-Z]{16}\b"
    r"|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{32,}\b"  # 32 or more hex digits, letters and digits
)
_MAX_SHOWN = 80
# A configured key shorter than this is not searched for in text: it would match ordinary words.
MIN_KEY_CHARS = 8
_keys: set[str] = set()
_keys_lock = threading.Lock()


def configured_key(env_name: str | None) -> str | None:
    """The API key held by the environment variable `env_name` (None when unset or empty), read now;
    from now on `redact` removes its exact value from any text, whatever its shape."""
    value = os.environ.get(env_name) if env_name else None
    add_secret(value)
    return value or None


def add_secret(value: str | None) -> None:
    """Have `redact` remove `value` (and its URL- and JSON-escaped forms, `\\uXXXX` escapes of every
    character included) from any text."""
    if not value or len(value.strip()) < MIN_KEY_CHARS:
        return
    forms = {value, value.strip(), quote(value, safe=""), json.dumps(value)[1:-1],
             json.dumps(value, ensure_ascii=False)[1:-1], "".join(f"\\u{ord(c):04x}" for c in value),
             "".join(f"\\u{ord(c):04X}" for c in value)}
    with _keys_lock:
        _keys.update(f for f in forms if len(f) >= MIN_KEY_CHARS)


def redact(text: str) -> str:
    """`text` with credentials replaced: the exact value of every configured key (`configured_key`),
    then Authorization headers, bearer tokens, api_key fields and keys of known providers' shapes."""
    with _keys_lock:
        keys = sorted(_keys, key=len, reverse=True)
    for key in keys:
        if key in text:
            text = text.replace(key, "[redacted]")

    def hide(match: re.Match[str]) -> str:
        prefix = match.group(1) or match.group(2) or ""
        return f"{prefix}[redacted]"

    return _SECRETS.sub(hide, text)


def shown(value: object, limit: int = _MAX_SHOWN) -> str:
    """A value as an error message shows it: its repr, cut to a readable length."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def error_line(error: object, limit: int | None = None) -> str:
    """A failure as a message or a log shows it: `Type: text` (a string as it is), on one line,
    credentials redacted, cut to `limit` characters (when given)."""
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    text = " ".join(redact(text).split())
    return text if limit is None or len(text) <= limit else text[: limit - 3] + "..."


class MemForestError(Exception):
    """Base class: a clear, user-facing message; the store is unchanged."""


class InputError(MemForestError):
    """Malformed session, turn, identifier or option."""


class StoreError(MemForestError):
    """The store is missing, locked, or fails its invariants."""


class ModelError(MemForestError):
    """A model call failed after its retries (timeout, server error, invalid output)."""


class ModelBusyError(ModelError):
    """A request failed through every retry with timeouts or server errors (an overloaded or restarting
    server): the model lives, and the same request may succeed later."""


class ModelUnavailableError(ModelError):
    """The model answers no request any more: its engine died, or its server could not be reached
    through every retry. An operation that meets it fails whole, never degrading around it, and a
    caller counting answers stops rather than count the requests it could not send."""


def caused_by(exc: BaseException | None,
              kinds: type[BaseException] | tuple[type[BaseException], ...]) -> BaseException | None:
    """The first exception of `kinds` that `exc` is, or was raised from or during (its cause and
    context chain), or None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, kinds):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def unavailable_cause(exc: BaseException | None) -> ModelUnavailableError | None:
    """The ModelUnavailableError that `exc` is, or was raised from or during, or None."""
    found = caused_by(exc, ModelUnavailableError)
    return found if isinstance(found, ModelUnavailableError) else None


class ConfigError(MemForestError):
    """A configuration cannot be built (unknown backend, missing package, bad value)."""
