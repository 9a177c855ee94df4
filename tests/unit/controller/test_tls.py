"""The webhook certificate: made when missing, kept while good, replaced before it ends."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from cryptography import x509

from agentworkers.controller.admission.tls import (
    RENEW_BEFORE,
    VALIDITY,
    CertificateWatch,
    self_signed,
)


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_a_certificate_is_made_once_and_kept_while_good(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path, ["127.0.0.1", "aw-webhook.aw-system.svc"])
    first = cert.read_bytes()
    sans = _cert(cert).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "aw-webhook.aw-system.svc" in sans.get_values_for_type(x509.DNSName)
    assert self_signed(tmp_path, ["127.0.0.1"])[0].read_bytes() == first  # a subset: kept
    assert self_signed(tmp_path, ["localhost"])[0].read_bytes() != first  # another name: new
    assert key.stat().st_mode & 0o777 == 0o600


def test_the_watch_asks_for_a_restart_before_expiry_or_when_replaced(tmp_path: Path) -> None:
    cert, _ = self_signed(tmp_path, ["127.0.0.1"])
    watch = CertificateWatch(cert)
    issued = _cert(cert).not_valid_before_utc
    assert watch.must_restart() is None
    almost = issued + VALIDITY - RENEW_BEFORE + dt.timedelta(days=1)
    assert "expires within" in (watch.must_restart(now=almost) or "")
    self_signed(tmp_path, ["localhost"])  # cert-manager (or a person) replaced the files
    assert "changed" in (watch.must_restart() or "")
