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


#: NAT64 prefixes (RFC 6052's well-known prefix and RFC 8215's local-use one): an address in
#: them reaches the IPv4 address in its last 32 bits through a translator.
_NAT64 = (ipaddress.IPv6Network("64:ff9b::/96"), ipaddress.IPv6Network("64:ff9b:1::/48"))


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address leads to, if it embeds one: IPv4-mapped
    (``::ffff:a.b.c.d``), 6to4 (``2002:AABB:CCDD::/48``), Teredo (the client address) or
    NAT64 (``64:ff9b::a.b.c.d``)."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if any(address in network for network in _NAT64):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def address_is_public(address: IPAddress) -> bool:
    """Only globally routable addresses (no loopback, private, link-local, reserved...),
    and for an IPv6 form that embeds an IPv4 address (NAT64, 6to4, Teredo, mapped), only
    when the IPv4 address is public too: Python calls ``64:ff9b::a00:1`` (10.0.0.1 through
    NAT64) and ``2002:7f00:1::`` (127.0.0.1 through 6to4) global."""
    inner = embedded_ipv4(address)
    return address.is_global and (inner is None or inner.is_global)


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


def url_redacted(url: str) -> str:
    """What a reader without the right to change a webhook sees of its URL: the scheme and
    host only. Receivers put their tokens in the path, the query or the user info
    (``https://hooks.slack.com/services/T/B/secret``), so all three are dropped."""
    from urllib.parse import urlsplit

    if not url:
        return ""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(hidden)"
    return f"{parts.scheme}://{host}{port}/…" if parts.scheme and host else "(hidden)"
