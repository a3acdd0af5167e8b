"""The SSRF guard connects to the address it checked: real local servers, real TLS.

A name that resolves once to an allowed address and then to a forbidden one (DNS
rebinding) must still reach the allowed address: the guard resolves once and connects to
the IP it vetted, carrying the name in ``Host`` and in the TLS server name. Only DNS (the
network boundary) is replaced, by a resolver that answers differently on each lookup.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from controlplane.outbound import DestinationRefused, post_pinned

VETTED = ipaddress.ip_address("127.0.0.2")


def only_vetted(address) -> bool:
    """The test's notion of "public": 127.0.0.2 only (127.0.0.1 plays the internal network)."""
    return address == VETTED


class Server:
    """A local HTTP(S) server on one address that records the requests it got."""

    def __init__(self, host: str, port: int = 0, tls: ssl.SSLContext | None = None) -> None:
        self.received: list[dict] = []
        self.server_names: list[str | None] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                server.received.append({"host": self.headers["Host"], "body": body})
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        if tls is not None:
            tls.sni_callback = lambda sock, name, ctx: self.server_names.append(name)
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def servers():
    started: list[Server] = []

    def start(host: str, port: int = 0, tls: ssl.SSLContext | None = None) -> Server:
        server = Server(host, port, tls)
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


@pytest.fixture
def resolver(monkeypatch):
    """DNS answers per name, one list per lookup (the last one repeats); lookups counted."""
    answers: dict[str, list[list[str]]] = {}
    lookups: dict[str, int] = {}
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        name = host.decode() if isinstance(host, bytes) else host
        if name not in answers:
            return real(host, port, *args, **kwargs)
        lookups[name] = lookups.get(name, 0) + 1
        sequence = answers[name]
        addresses = sequence[min(lookups[name], len(sequence)) - 1]
        return [
            (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, int(port)))
            for address in addresses
        ]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return answers, lookups


def _same_port_pair(servers) -> tuple[Server, Server]:
    """The vetted server on 127.0.0.2 and an "internal" one on 127.0.0.1, same port."""
    for _ in range(20):
        vetted = servers("127.0.0.2")
        with contextlib.suppress(OSError):
            return vetted, servers("127.0.0.1", vetted.port)
    raise RuntimeError("no port free on both loopback addresses")


def test_a_rebinding_name_still_reaches_the_address_that_was_checked(servers, resolver) -> None:
    answers, lookups = resolver
    vetted, internal = _same_port_pair(servers)
    # First answer allowed, every later answer the internal network: what a rebinding
    # attacker's DNS server does between the check and the connection.
    answers["rebind.test"] = [["127.0.0.2"], ["127.0.0.1"]]
    response = post_pinned(
        f"http://rebind.test:{vetted.port}/hook",
        content=b"{}",
        headers={"Content-Type": "application/json"},
        timeout=5,
        allowed=only_vetted,
    )
    assert response.status_code == 204
    assert lookups["rebind.test"] == 1  # resolved once: nothing could answer differently
    assert vetted.received == [{"host": f"rebind.test:{vetted.port}", "body": b"{}"}]
    assert internal.received == []


def test_a_name_resolving_to_a_forbidden_address_is_refused_before_sending(servers) -> None:
    internal = servers("127.0.0.1")
    with pytest.raises(DestinationRefused, match="127.0.0.1 is not a public address"):
        post_pinned(f"http://localhost:{internal.port}/hook", content=b"{}", headers={}, timeout=5)
    assert internal.received == []


def test_one_forbidden_answer_among_allowed_ones_refuses_the_name(servers, resolver) -> None:
    answers, _ = resolver
    vetted, internal = _same_port_pair(servers)
    answers["mixed.test"] = [["127.0.0.2", "127.0.0.1"]]
    with pytest.raises(DestinationRefused):
        post_pinned(
            f"http://mixed.test:{vetted.port}/",
            content=b"x",
            headers={},
            timeout=5,
            allowed=only_vetted,
        )
    assert vetted.received == [] and internal.received == []


def test_an_unreachable_vetted_address_falls_through_to_the_next(servers, resolver) -> None:
    answers, _ = resolver
    vetted = servers("127.0.0.2")
    answers["two.test"] = [["127.0.0.3", "127.0.0.2"]]  # nothing listens on .3
    response = post_pinned(
        f"http://two.test:{vetted.port}/",
        content=b"x",
        headers={},
        timeout=5,
        allowed=lambda a: str(a) in ("127.0.0.2", "127.0.0.3"),
    )
    assert response.status_code == 204 and len(vetted.received) == 1


def test_urls_that_are_not_http_are_refused() -> None:
    for url in ("file:///etc/passwd", "gopher://example.com/", "http:///no-host"):
        with pytest.raises(DestinationRefused):
            post_pinned(url, content=b"", headers={}, timeout=1)


def _tls_pair(name: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server context with a certificate for ``name``, client context trusting its CA)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "outbound test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with _pem_files(leaf, key) as (cert_file, key_file):
        server.load_cert_chain(cert_file, key_file)
    client = ssl.create_default_context(cadata=ca.public_bytes(serialization.Encoding.PEM).decode())
    return server, client


@contextlib.contextmanager
def _pem_files(cert, key):
    import tempfile

    with (
        tempfile.NamedTemporaryFile(suffix=".pem") as cert_file,
        tempfile.NamedTemporaryFile(suffix=".pem") as key_file,
    ):
        cert_file.write(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        cert_file.flush()
        key_file.flush()
        yield cert_file.name, key_file.name


def test_tls_to_the_pinned_address_sends_the_name_as_sni_and_verifies_it(servers, resolver) -> None:
    answers, lookups = resolver
    server_tls, client_tls = _tls_pair("hooks.test")
    vetted = servers("127.0.0.2", tls=server_tls)
    answers["hooks.test"] = [["127.0.0.2"], ["127.0.0.1"]]
    response = post_pinned(
        f"https://hooks.test:{vetted.port}/hook",
        content=b"{}",
        headers={},
        timeout=5,
        allowed=only_vetted,
        verify=client_tls,
    )
    assert response.status_code == 204
    assert vetted.server_names == ["hooks.test"]  # SNI: the name, not the IP
    assert vetted.received[0]["host"] == f"hooks.test:{vetted.port}"
    assert lookups["hooks.test"] == 1
    # The certificate is checked against the name: a certificate for another name fails.
    answers["other.test"] = [["127.0.0.2"]]
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        post_pinned(
            f"https://other.test:{vetted.port}/hook",
            content=b"{}",
            headers={},
            timeout=5,
            allowed=only_vetted,
            verify=client_tls,
        )


@pytest.mark.parametrize(
    "address",
    [
        "64:ff9b::a00:1",  # NAT64 (RFC 6052) of 10.0.0.1
        "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254 (cloud metadata)
        "64:ff9b:1::c0a8:101",  # local-use NAT64 (RFC 8215) of 192.168.1.1
        "2002:a00:1::1",  # 6to4 of 10.0.0.1
        "2002:7f00:1::",  # 6to4 of 127.0.0.1
        "::ffff:10.0.0.1",  # IPv4-mapped
    ],
)
def test_ipv6_forms_embedding_an_internal_ipv4_address_are_not_public(address) -> None:
    from controlplane.outbound import address_is_public

    assert not address_is_public(ipaddress.ip_address(address))


def test_ipv6_forms_embedding_a_public_ipv4_address_and_plain_public_ones_are_public() -> None:
    from controlplane.outbound import address_is_public, embedded_ipv4

    nat64_public = ipaddress.ip_address("64:ff9b::808:808")  # 8.8.8.8
    assert embedded_ipv4(nat64_public) == ipaddress.ip_address("8.8.8.8")
    assert address_is_public(nat64_public)
    assert address_is_public(ipaddress.ip_address("2606:4700:4700::1111"))
    assert address_is_public(ipaddress.ip_address("8.8.8.8"))
