"""Outbound HTTP to destinations a tenant chose (budget webhooks), pinned to vetted addresses.

Server-side request forgery guard without a DNS-rebinding window: the host is resolved
once, every address it resolves to is checked, and the connection goes to a checked
address (the URL's host replaced by the IP literal). The original name travels as the
``Host`` header and as the TLS server name (``sni_hostname``), so virtual hosting and
certificate verification work as if httpx had resolved the name itself, but httpx never
resolves it again: a second answer, however short its TTL, cannot redirect the request.
Redirects are never followed and proxy variables from the environment are ignored (a
proxy would make the proxy, not the vetted address, the one that connects).
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from collections.abc import Callable

import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
AddressAllowed = Callable[[IPAddress], bool]


class DestinationRefused(Exception):
    """The destination may not be called: it does not resolve, or to a forbidden address."""


def address_is_public(address: IPAddress) -> bool:
    """Only globally routable addresses (no loopback, private, link-local, reserved...)."""
    return address.is_global


def destination_resolve(host: str, port: int, *, allowed: AddressAllowed) -> list[IPAddress]:
    """Resolve ``host`` once; every address must pass ``allowed``.

    Raises DestinationRefused when the name does not resolve or any address is refused
    (a name that resolves to one public and one private address is refused as a whole:
    which one a client would pick is not ours to predict).
    """
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        raise DestinationRefused("webhook host does not resolve") from None
    addresses: list[IPAddress] = []
    for info in infos:
        # An IPv6 zone id ("fe80::1%eth0") is not part of the address.
        address = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        if not allowed(address):
            raise DestinationRefused(f"webhook destination {address} is not a public address")
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise DestinationRefused("webhook host does not resolve")
    return addresses


def post_pinned(
    url: str,
    *,
    content: bytes,
    headers: dict[str, str],
    timeout: float,
    allowed: AddressAllowed = address_is_public,
    verify: ssl.SSLContext | bool = True,
) -> httpx.Response:
    """POST ``content`` to ``url`` over a connection to an address ``allowed`` accepted.

    The addresses are tried in resolver order; a connection error moves on to the next
    one, the last error is raised (httpx.HTTPError). Raises DestinationRefused before
    anything is sent when the URL is not http(s) or the host fails the check. The client
    is closed before returning (the response body is read).
    """
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        raise DestinationRefused("webhook URL is not a valid URL") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise DestinationRefused("webhook URL must be http:// or https:// with a host")
    name = parsed.raw_host.decode("ascii")  # IDNA-encoded, as DNS and TLS want it
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    addresses = destination_resolve(name, port, allowed=allowed)
    # The Host header as httpx would write it: the name, and the port when not the default.
    host_header = parsed.netloc.decode("ascii")
    extensions = {"sni_hostname": name} if parsed.scheme == "https" else {}
    last_error: httpx.HTTPError | None = None
    with httpx.Client(
        timeout=timeout, follow_redirects=False, trust_env=False, verify=verify
    ) as client:
        for address in addresses:
            try:
                return client.post(
                    parsed.copy_with(host=str(address)),
                    content=content,
                    headers={**headers, "Host": host_header},
                    extensions=extensions,
                )
            except httpx.ConnectError as exc:
                last_error = exc
    assert last_error is not None  # addresses is never empty
    raise last_error
