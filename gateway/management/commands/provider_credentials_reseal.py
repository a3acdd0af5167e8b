"""``cacheplane provider-credentials-reseal``: re-encrypt every tenant's provider key
under the newest ``CACHEPLANE_PROVIDER_CREDENTIAL_KEYS`` entry (an encryption-key rotation:
add the new key in front, run this, then drop the old key).

One transaction, one platform audit event (``gateway.provider_credential.reseal``); when a
row opens with no configured key nothing is changed and the command exits non-zero.
"""

from __future__ import annotations

from typing import Any

from cryptography.fernet import InvalidToken
from django.core.management.base import BaseCommand, CommandError

from gateway.provider_credentials import provider_credentials_reseal_all_tenants
from tenants.actor import Actor


class Command(BaseCommand):
    help = "Re-encrypt every tenant's provider API keys under the newest credential key."

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            count = provider_credentials_reseal_all_tenants(actor=Actor.cli())
        except InvalidToken as error:
            raise CommandError(
                "A sealed provider key opens with none of CACHEPLANE_PROVIDER_CREDENTIAL_KEYS; "
                "nothing was changed. Put the key that sealed it back in the list and rerun."
            ) from error
        self.stdout.write(f"resealed {count} provider credential(s)")
