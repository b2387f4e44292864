"""The one TLS context every HTTP client of the process shares still verifies certificates and host names."""

from __future__ import annotations

import ssl

from adapters.tls import shared_ssl_context


def test_the_shared_tls_context_verifies_certificates_and_host_names():
    context = shared_ssl_context()
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert context.get_ca_certs() or context.cert_store_stats()["x509_ca"] > 0
    assert shared_ssl_context() is context  # built once
