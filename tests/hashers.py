"""A PBKDF2 hasher with few iterations, for the test suite only.

Django's default PBKDF2 (about a million iterations) costs 0.5-2.5 s per password on this
machine, and most fixtures create users. The hash keeps Django's ``pbkdf2_sha256`` format
with its iteration count inside it, so servers the tests start in other processes (with the
production hasher list) still verify these passwords.
"""

from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class FewIterationsPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    """``pbkdf2_sha256`` with 1,000 iterations (tests only: never in settings)."""

    iterations = 1_000
