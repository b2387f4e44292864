"""The private-mode passphrase: a slow scrypt hash to configure, checked in constant time."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from dataclasses import dataclass

# n=2**15, r=8, p=1: about 32 MiB and tens of milliseconds per check, which makes
# guessing offline expensive; online guessing is stopped by the lockout.
_N, _R, _P = 2**15, 8, 1
_MAXMEM = 64 * 1024 * 1024
_FORMAT = re.compile(r"^scrypt\$n=(\d+),r=(\d+),p=(\d+)\$([A-Za-z0-9+/=]+)\$([A-Za-z0-9+/=]+)$")


class InvalidPassphraseHash(ValueError):
    """The configured hash is not one `companion passphrase` prints."""


@dataclass(frozen=True, slots=True)
class PassphraseHash:
    n: int
    r: int
    p: int
    salt: bytes
    digest: bytes

    @classmethod
    def parse(cls, text: str) -> PassphraseHash:
        match = _FORMAT.match(text.strip())
        if not match:
            raise InvalidPassphraseHash(
                "expected scrypt$n=...,r=...,p=...$salt$hash as printed by `companion passphrase`"
            )
        n, r, p = (int(match.group(i)) for i in (1, 2, 3))
        if n < 2**14 or n & (n - 1) or not (1 <= r <= 32) or not (1 <= p <= 16):
            raise InvalidPassphraseHash(
                "scrypt parameters are too weak or malformed (n must be a power of two >= 16384)"
            )
        try:
            salt = base64.b64decode(match.group(4), validate=True)
            digest = base64.b64decode(match.group(5), validate=True)
        except ValueError as exc:
            raise InvalidPassphraseHash("salt or hash is not valid base64") from exc
        if len(salt) < 16 or len(digest) < 32:
            raise InvalidPassphraseHash("salt or hash is too short")
        return cls(n, r, p, salt, digest)

    def verify(self, passphrase: str) -> bool:
        """Constant-time check. Slow on purpose: call it off the event loop."""
        candidate = hashlib.scrypt(
            passphrase.encode("utf-8"),
            salt=self.salt,
            n=self.n,
            r=self.r,
            p=self.p,
            maxmem=_MAXMEM,
            dklen=len(self.digest),
        )
        return hmac.compare_digest(candidate, self.digest)


def hash_passphrase(passphrase: str) -> str:
    """Return the text to put in COMPANION_PRIVATE_PASSPHRASE_HASH."""
    if not passphrase:
        raise ValueError("the passphrase is empty")
    salt = os.urandom(16)
    digest = hashlib.scrypt(passphrase.encode("utf-8"), salt=salt, n=_N, r=_R, p=_P, maxmem=_MAXMEM, dklen=32)
    return f"scrypt$n={_N},r={_R},p={_P}${_b64(salt)}${_b64(digest)}"


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")
