"""Connection options shared by Client and Worker: TLS, credentials (HTTP
Basic or a bearer token, sent as metadata on every RPC), and the check that
keeps credentials off plaintext connections beyond loopback (tls.go)."""

from __future__ import annotations

import base64
import dataclasses
import ipaddress
import os
from typing import Sequence

import grpc

from .errors import ConfigError, PlaintextCredentialsError


@dataclasses.dataclass(frozen=True)
class TLS:
    """TLS for the connection. ca_file is a PEM bundle of the roots to trust
    (None: the system's); cert_file and key_file (both or neither) are a
    client certificate, which services with PULSE_TLS_CLIENT_CA require and
    may take as the caller's identity; server_name overrides the name the
    server's certificate is checked against (default: the target's host).
    The PEM contents may be given instead of files (ca_pem, cert_pem,
    key_pem, as bytes)."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None
    ca_pem: bytes | None = None
    cert_pem: bytes | None = None
    key_pem: bytes | None = None

    def credentials(self) -> grpc.ChannelCredentials:
        ca = self.ca_pem if self.ca_pem is not None else _read("TLS CA file", self.ca_file)
        if ca is not None and b"-----BEGIN CERTIFICATE-----" not in ca:
            raise ConfigError(f"pulse: TLS CA file {self.ca_file or '(ca_pem)'} holds no PEM certificate")
        cert = self.cert_pem if self.cert_pem is not None else _read("TLS client certificate", self.cert_file)
        key = self.key_pem if self.key_pem is not None else _read("TLS client key", self.key_file)
        if (cert is None) != (key is None):
            raise ConfigError(
                "pulse: TLS client certificate: set both the certificate file and the key file, or neither "
                f"(got {self.cert_file!r} and {self.key_file!r})"
            )
        return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)


def _read(what: str, path: str | None) -> bytes | None:
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ConfigError(f"pulse: {what}: {e}") from e


@dataclasses.dataclass
class ConnOptions:
    """What Client and Worker take about the connection, as keyword
    arguments: user/password (HTTP Basic) or token (Bearer), extra
    metadata, tls, allow_plaintext_credentials, and grpc channel_options."""

    user: str | None = None
    password: str | None = None
    token: str | None = None
    metadata: Sequence[tuple[str, str]] = ()
    tls: TLS | None = None
    allow_plaintext_credentials: bool = False
    channel_options: Sequence[tuple[str, object]] = ()

    def call_metadata(self) -> tuple[tuple[str, str], ...]:
        md = list(self.metadata)
        if self.user is not None:
            raw = f"{self.user}:{self.password or ''}".encode()
            md.append(("authorization", "Basic " + base64.b64encode(raw).decode()))
        elif self.token is not None:
            md.append(("authorization", "Bearer " + self.token))
        return tuple(md)

    def has_credentials(self) -> bool:
        return self.user is not None or self.token is not None or any(
            k.lower() == "authorization" for k, _ in self.metadata
        )

    def check(self, targets: Sequence[str]) -> None:
        if self.user is not None and self.token is not None:
            raise ConfigError("pulse: set user/password or token, not both")
        if self.password is not None and self.user is None:
            raise ConfigError("pulse: password given without a user")
        if self.user is not None and (":" in self.user or not self.user):
            raise ConfigError("pulse: user must be non-empty and hold no colon")
        if self.tls is not None:
            self._creds = self.tls.credentials()  # fail now on unreadable files
        if not self.has_credentials() or self.tls is not None or self.allow_plaintext_credentials:
            return
        for t in targets:
            if not loopback_target(t):
                raise PlaintextCredentialsError(
                    "pulse: refusing to send credentials over plaintext to an address that is not loopback: "
                    f"{t!r}; use tls=TLS(...), or allow_plaintext_credentials=True on a trusted network"
                )

    def channel(self, target: str) -> grpc.aio.Channel:
        opts = list(self.channel_options)
        if self.tls is not None:
            if self.tls.server_name:
                opts.append(("grpc.ssl_target_name_override", self.tls.server_name))
            return grpc.aio.secure_channel(target, self._creds, options=opts)
        return grpc.aio.insecure_channel(target, options=opts)


def conn_options(kw: dict) -> ConnOptions:
    names = {f.name for f in dataclasses.fields(ConnOptions)}
    unknown = sorted(set(kw) - names)
    if unknown:
        raise ConfigError(f"pulse: unknown option(s) {', '.join(unknown)}")
    return ConnOptions(**kw)


def loopback_target(target: str) -> bool:
    """Whether a gRPC target names only this machine: a Unix socket,
    localhost, or loopback IPs, with or without the dns:, passthrough:,
    ipv4: or ipv6: scheme. A target it cannot read is not loopback."""
    endpoints = target
    scheme, sep, rest = target.partition(":")
    if sep:
        s = scheme.lower()
        if s in ("unix", "unix-abstract"):
            return True
        if s in ("dns", "passthrough"):
            endpoints = _strip_authority(rest)
        elif s in ("ipv4", "ipv6"):
            endpoints = rest
    return all(_loopback_host(ep) for ep in endpoints.split(","))


def _strip_authority(s: str) -> str:
    if s.startswith("//"):
        rest = s[2:]
        _, sep, ep = rest.partition("/")
        return ep if sep else ""
    return s


def _loopback_host(endpoint: str) -> bool:
    host = endpoint
    if endpoint.startswith("["):
        close = endpoint.find("]")
        if close < 0:
            return False
        host, port = endpoint[1:close], endpoint[close + 1 :]
        if port and (not port.startswith(":") or not port[1:].isdigit()):
            return False
    elif endpoint.count(":") == 1:
        host, port = endpoint.split(":")
        if port.strip("0123456789"):
            return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes")
