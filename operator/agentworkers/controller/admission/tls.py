"""A self-signed serving certificate for the admission webhook, renewed before it expires.

kopf can make one too, but only through `certbuilder`/`oscrypto`; `cryptography` is
the well-kept library for the job. On a cluster with cert-manager, mount its
certificate into the TLS directory instead: an existing, valid pair is used as is.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import logging
import os
import signal
import threading
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

log = logging.getLogger(__name__)
VALIDITY = dt.timedelta(days=90)
RENEW_BEFORE = dt.timedelta(days=30)


def self_signed(directory: Path, hostnames: Sequence[str]) -> tuple[Path, Path]:
    """tls.crt and tls.key in `directory`: made, or renewed when expiring or for other names."""
    cert_path, key_path = directory / "tls.crt", directory / "tls.key"
    wanted = {h for h in hostnames if h}
    if _still_good(cert_path, key_path, wanted):
        return cert_path, key_path
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for host in sorted(wanted):
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "agentworkers-webhook")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


def _still_good(cert_path: Path, key_path: Path, wanted: set[str]) -> bool:
    if not (cert_path.exists() and key_path.exists()):
        return False
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return False
    have = {str(v) for v in sans.get_values_for_type(x509.IPAddress)}
    have |= set(sans.get_values_for_type(x509.DNSName))
    return not renewal_due(cert) and wanted <= have


def renewal_due(cert: x509.Certificate, now: dt.datetime | None = None) -> bool:
    return cert.not_valid_after_utc - (now or dt.datetime.now(dt.UTC)) <= RENEW_BEFORE


class CertificateWatch:
    """Restarts the operator (SIGTERM to itself) when its serving certificate must change.

    kopf's webhook server reads the certificate once, at start. So when a self-signed
    one nears its end, or a mounted one (cert-manager's) is replaced, the process ends
    gracefully and its Deployment starts it again, which renews or loads the new one;
    with several replicas, a standby takes over meanwhile.
    """

    def __init__(self, cert_path: Path, every: float = 3600.0) -> None:
        self.cert_path = cert_path
        self.loaded = cert_path.read_bytes()
        self.every = every
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="certificate-watch", daemon=True)

    def start(self) -> CertificateWatch:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()

    def must_restart(self, now: dt.datetime | None = None) -> str | None:
        """Why the certificate in use must change, or None."""
        current = self.cert_path.read_bytes() if self.cert_path.exists() else b""
        if current != self.loaded:
            return f"{self.cert_path} changed"
        if renewal_due(x509.load_pem_x509_certificate(self.loaded), now):
            return f"{self.cert_path} expires within {RENEW_BEFORE.days} days"
        return None

    def _run(self) -> None:
        while not self.stopped.wait(self.every):
            reason = self.must_restart()
            if reason:
                log.warning("restarting to load a new webhook certificate: %s", reason)
                os.kill(os.getpid(), signal.SIGTERM)
                return
