"""Credentials of a deployment, made with the ``cryptography`` package: a certificate authority, the SuperLink's TLS
certificate signed by it, and each SuperNode's authentication key pair (ECDSA P-384, OpenSSH format, as
``flwr supernode register`` and ``flower-supernode --auth-supernode-private-key`` read them). Private keys are
written 0600 in folders of mode 0700."""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

VALID_DAYS = 30


@dataclass(frozen=True, kw_only=True)
class Tls:
    """The CA certificate every party trusts and the SuperLink's certificate and key (PEM files)."""

    ca: Path
    certificate: Path
    key: Path


@dataclass(frozen=True, kw_only=True)
class NodeKey:
    """A SuperNode's key pair: the private key it signs with, the public key registered on the SuperLink."""

    private: Path
    public: Path


def write_private(path: Path, data: bytes) -> Path:
    """``data`` into ``path`` with mode 0600 from the start (its folder 0700)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return path


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "hdp-planner"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common)])  # fmt: skip


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())  # fmt: skip


def make_tls(folder: str | Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> Tls:
    """A fresh CA and a SuperLink certificate for ``hosts`` (IP addresses or DNS names) signed by it."""
    folder = Path(folder)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca = (x509.CertificateBuilder().subject_name(_name("hdp-planner deployment CA")).issuer_name(_name(
        "hdp-planner deployment CA")).public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(VALID_DAYS))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .sign(ca_key, hashes.SHA384()))  # fmt: skip
    key = ec.generate_private_key(ec.SECP384R1())
    names = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    cert = (x509.CertificateBuilder().subject_name(_name(hosts[0])).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(VALID_DAYS))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA384()))  # fmt: skip
    write_private(folder / "ca.key", _pem_key(ca_key))
    (folder / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (folder / "server.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Tls(
        ca=folder / "ca.crt", certificate=folder / "server.pem", key=write_private(folder / "server.key", _pem_key(key))
    )


def make_node_key(folder: str | Path, name: str) -> NodeKey:
    """A SuperNode key pair ``folder/name`` (private, OpenSSH) and ``folder/name.pub``."""
    folder = Path(folder)
    key = ec.generate_private_key(ec.SECP384R1())
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption())  # fmt: skip
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    (folder / f"{name}.pub").parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    (folder / f"{name}.pub").write_bytes(public + b"\n")
    return NodeKey(private=write_private(folder / name, private), public=folder / f"{name}.pub")
