"""PrometheusMetrics: label values are a few fixed words, whatever a caller passes; nothing else becomes a series."""

from __future__ import annotations

import re

from adapters.web.metrics import MAX_REASONS, PrometheusMetrics

ID = "5550123987"


def labels_of(text: str) -> list[str]:
    return [value for labels in re.findall(r"\{([^}]*)\}", text) for value in re.findall(r'="([^"]*)"', labels)]


def test_a_label_is_one_of_its_fixed_words_whatever_a_caller_passes():
    metrics = PrometheusMetrics()
    metrics.update_received(f"telegram:{ID}")
    metrics.turn_finished("private")
    metrics.model_request(f"ok {ID}", 0.2, 10, 5)
    metrics.delivery_settled(f"reply:{ID}", "private")
    metrics.send_error(f"chat {ID} not found")
    metrics.nudge_decision("private", "skipped")
    metrics.database_write(ID, 0.01)
    text = metrics.render().decode()
    assert ID not in text and "private" not in labels_of(text)
    assert 'companion_updates_received_total{platform="other"} 1.0' in text
    assert 'companion_send_errors_total{reason="other"} 1.0' in text
    assert not any(
        ch.isdigit() for value in labels_of(text) if not re.fullmatch(r"[0-9.e+-]+|\+Inf", value) for ch in value
    )


def test_send_error_reasons_are_words_and_bounded_in_number():
    metrics = PrometheusMetrics()
    for n in range(MAX_REASONS + 10):
        metrics.send_error("Reason" + "x" * (n % 30) + chr(ord("a") + n % 26))
    metrics.send_error("NetworkError")
    reasons = set(labels_of(metrics.render().decode())) - {"other"}
    assert len([r for r in reasons if r.startswith(("Reason", "Network"))]) <= MAX_REASONS


def test_no_counter_carries_a_created_timestamp():
    metrics = PrometheusMetrics()
    metrics.turn_finished("ok")
    assert "_created" not in metrics.render().decode()
