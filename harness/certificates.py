"""A throwaway CA, a server certificate for localhost/127.0.0.1 and client certificates,
made with the openssl CLI at test time (no key or certificate is kept in the repository)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _signed(where: Path, name: str, subject: str, extensions: str) -> None:
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject,
             "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=where)  # fmt: skip
    (where / f"{name}.ext").write_text(extensions)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext",
             "-out", f"{name}.pem", cwd=where)  # fmt: skip


def make_certificates(where: Path) -> dict[str, Path]:
    """ca.pem, server.pem/.key (localhost, 127.0.0.1) in `where`."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
             "/CN=gateway-test-ca", "-keyout", "ca.key", "-out", "ca.pem", cwd=where)  # fmt: skip
    _signed(where, "server", "/CN=localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    return {"ca": where / "ca.pem", "cert": where / "server.pem", "key": where / "server.key"}


def make_client_certificate(where: Path, common_name: str) -> tuple[Path, Path]:
    """A client certificate (and its key) for `common_name`, signed by the CA in `where`."""
    _signed(where, f"client-{common_name}", f"/CN={common_name}", "extendedKeyUsage=clientAuth\n")
    return where / f"client-{common_name}.pem", where / f"client-{common_name}.key"


def make_certificates_with_clients(where: Path, *common_names: str) -> dict[str, Path]:
    """The CA and server files of `make_certificates`, plus for each name a client
    certificate and key signed by the same CA (keys `<name>.pem`, `<name>.key`)."""
    found = make_certificates(where)
    for name in common_names:
        found[f"{name}.pem"], found[f"{name}.key"] = make_client_certificate(where, name)
    return found
