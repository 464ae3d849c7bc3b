"""Making API keys and finding them again: the secret, its hash, its id.

A key is `nx-` followed by 32 random bytes, base64url (43 characters): 256
bits of entropy. Only its SHA-256 is stored. No slow KDF (bcrypt, scrypt,
argon2) is needed: those protect low-entropy passwords against guessing,
and nobody can guess a 256-bit random value however fast the hash; a slow
hash would instead cost every request milliseconds of CPU, and a salted one
could not be looked up by its hash. The lookup is by the hash (an index,
not a comparison of secrets); the one comparison left, of the stored hash
with the presented key's, uses `hmac.compare_digest`.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from cortex.store.keys import ApiKey

PREFIX = "nx-"
SECRET_BYTES = 32


def new_secret() -> str:
    return PREFIX + secrets.token_urlsafe(SECRET_BYTES)


def new_key_id() -> str:
    return "key_" + secrets.token_hex(8)


def hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def matches(record: ApiKey, secret: str) -> bool:
    """Whether `secret` is the key of `record`, in constant time."""
    return hash_matches(record, hash_key(secret))


def hash_matches(record: ApiKey, key_hash: str) -> bool:
    """`matches` for a secret already hashed (hashing once a request)."""
    return hmac.compare_digest(record.key_hash, key_hash)


@dataclass(frozen=True)
class KeyRequest:
    """What `neuraxis keys create` asks for."""

    tenant: str
    models: list[str]
    rpm: int | None = None
    tpm: int | None = None
    max_concurrent: int | None = None
    expires_days: int | None = None


def make_key(request: KeyRequest, now: int) -> tuple[str, ApiKey]:
    """A new key: the secret (shown once) and the record to store."""
    secret = new_secret()
    expires = now + request.expires_days * 86_400 if request.expires_days is not None else None
    record = ApiKey(
        id=new_key_id(),
        tenant=request.tenant,
        key_hash=hash_key(secret),
        created_at=now,
        models=list(request.models),
        rpm=request.rpm,
        tpm=request.tpm,
        max_concurrent=request.max_concurrent,
        expires_at=expires,
    )
    return secret, record
