"""The one redaction rule: what of the configuration, a message or a log line is a secret, and its mask.

Everything that prints or logs passes its text or values through here (`config`, error messages, logs,
`status`, the dead-letter listing, registry errors), so a secret is masked the same way everywhere. Typed
secrets (`SecretStr`) are masked by type; in maps (`kafka.properties`, `catalog.properties`, `spark.conf`, …)
a key that names a credential masks its value; in any text, `user:pass@` in a URL and `password=…` (JAAS
strings, JDBC URIs, Java options) mask the credential. The lower layers (`registry`, `tables`, `cdc`) import it
as they import the settings.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import SecretStr

REDACTED = "***"

# what names a credential: a key that matches masks its value
_WORDS = (r"password|passwd|passphrase|(?<![a-z])pass(?![a-z])|pwd|secret|token|credential|jaas|auth(?!or)"
          r"|(?:api|access|private|account|signing|sas|secret|master|encryption)[._-]?key")
_SECRET_KEY = re.compile(_WORDS, re.IGNORECASE)
# `scheme://userinfo@host`: the userinfo, with or without a password, is a credential
_USERINFO = r"(?P<scheme>\b[a-z][a-z0-9+.-]*://)[^/\s@]+(?:@[^/\s@]+)*@"
_URL_USERINFO = re.compile(_USERINFO, re.IGNORECASE)
# `password=p`, `password="p"`, `token: p` inside a longer text (JAAS, JDBC properties, options); a value that
# is masked already or is a URL (`jdbc:…`) is left as it is. The key is a whole token (`[\w.-]`) followed by
# `=` or `:`, tried only where a token starts and only if one follows: `[\w.-]*(?:words)[\w.-]*` tried at every
# character backtracks through every word at every position of every token, 300 µs a line of Spark's log in
# Java (log4j2's `%replace`: a fifth of JFR's samples of a test session's JVM) against 20 µs so.
_ASSIGNED = (rf"(?<![\w.-])(?=[\w.-]++\s*[=:])(?=[\w.-]*?(?:{_WORDS}))(?P<key>[\w.-]++)"
             rf"(?P<sep>\s*[=:]\s*)(?!{re.escape(REDACTED)}|//)"
             r"(?P<quote>[\"']?)(?P<value>(?<=\")[^\"]*(?=\")|(?<=')[^']*(?=')|(?<![\"'])[^\s;&,)\"']+)")
_ASSIGNED_SECRET = re.compile(_ASSIGNED, re.IGNORECASE)


def is_secret_key(key: str) -> bool:
    """Whether a setting, property or log field of this name holds a credential."""
    return bool(_SECRET_KEY.search(key))


def redact_text(text: str) -> str:
    """The text with URL userinfo and `secret-key=value` assignments masked."""
    text = _URL_USERINFO.sub(rf"\g<scheme>{REDACTED}@", text)
    return _ASSIGNED_SECRET.sub(rf"\g<key>\g<sep>\g<quote>{REDACTED}", text)


def java_replacements() -> list[tuple[str, str]]:
    """`redact_text`'s patterns as (Java regex, replacement) pairs, in order, for log4j2's `%replace` (the
    Spark JVM's log, `pipeline/runtime/spark.py`): the same rule, translated, so the two cannot drift."""
    def java(pattern: re.Pattern[str], *groups: str) -> str:
        """Groups by number: `${name}` would be a variable to log4j2's configuration."""
        return "".join(f"${pattern.groupindex[g]}" for g in groups)

    return [("(?i)" + _USERINFO.replace("(?P<", "(?<"), java(_URL_USERINFO, "scheme") + f"{REDACTED}@"),
            ("(?i)" + _ASSIGNED.replace("(?P<", "(?<"), java(_ASSIGNED_SECRET, "key", "sep", "quote") + REDACTED)]


def redact(value: Any, key: str = "") -> Any:
    """`value` with every secret in it masked: a value under a secret key, typed secrets, and secrets inside
    texts, mappings and sequences (a mapping's keys name its values)."""
    if isinstance(value, SecretStr) or (key and is_secret_key(key) and value not in (None, "")):
        return REDACTED
    if isinstance(value, dict):
        return {k: redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v) for v in value)
    if isinstance(value, str):
        return redact_text(value)
    return value
