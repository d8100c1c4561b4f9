"""The redaction detectors one by one (issue 47, item 2): what each finds, what its checksum
refuses, and what it must leave alone; the redactor's placeholders."""

from __future__ import annotations

import pytest

from stream.redact.detectors import (
    DEFAULT_KINDS,
    builtin,
    cards,
    emails,
    iban_valid,
    ibans,
    ip_addresses,
    luhn,
    patterns,
    phones,
    secrets,
    url_credentials,
    words,
)
from stream.redact.redactor import Redaction


def found(detector, text: str) -> list[str]:  # type: ignore[no-untyped-def]
    return [text[f.start : f.end] for f in detector(text)]


def test_email_addresses() -> None:
    text = "write to ana.maria+shop@mail.example.co.uk, not to @handle or a@b or x@y.z1"
    assert found(emails, text) == ["ana.maria+shop@mail.example.co.uk"]


def test_card_numbers_pass_luhn_and_start_as_a_network_does() -> None:
    assert luhn("4111111111111111") and not luhn("4111111111111112")
    text = "visa 4111 1111 1111 1111, amex 378282246310005, bad 4111-1111-1111-1112"
    assert found(cards, text) == ["4111 1111 1111 1111", "378282246310005"]
    # Luhn-valid, but no network issues 16 digits starting with 9 or 13 starting with 5
    assert found(cards, "ref 9999999999999995 and 5555555555554") == []
    assert found(cards, "+44 117 496 0167") == []  # a phone number's digits


def test_ibans_pass_mod_97_at_their_countrys_length() -> None:
    assert iban_valid("GB82WEST12345698765432") and iban_valid("DE89 3704 0044 0532 0130 00")
    assert not iban_valid("GB82WEST12345698765433")  # the check digits do not hold
    assert not iban_valid("DE89370400440532013000FF")  # not Germany's 22 characters
    text = "pay to DE89 3704 0044 0532 0130 00 or GB82WEST12345698765433"
    assert found(ibans, text) == ["DE89 3704 0044 0532 0130 00"]


def test_ip_addresses_but_not_versions_or_times() -> None:
    text = "server 10.0.0.12, v1.2.3.4, version 2.0.1.7, 999.1.1.1, ::1 and 2001:db8::8a2e:370:7334"
    assert found(ip_addresses, text) == ["10.0.0.12", "2001:db8::8a2e:370:7334"]
    assert found(ip_addresses, "at 12:30:45 and a ratio 3:4:5, ip 192.168.1.1.") == ["192.168.1.1"]


def test_phone_numbers_written_as_phones_or_valid_in_context() -> None:
    find = phones(("US", "GB", "DE"))
    text = "call (650) 253-0000 or +44 20 7946 0958 or 030 901820"
    assert found(find, text) == ["(650) 253-0000", "+44 20 7946 0958", "030 901820"]
    assert found(find, "my phone is 6502530000") == ["6502530000"]
    assert found(find, "Tel:+44 20 7946 0958") == ["+44 20 7946 0958"]  # after a word's colon
    # a bare number with no phone word, an order id, a date, a time, an amount
    clean = "build 6502530000, order #6502530000, 2024-06-01, 18:30:02.100000, $1 234 567"
    assert found(find, clean) == []


def test_url_credentials_and_secrets() -> None:
    assert found(url_credentials, "postgres://app:s3cr3t@db.internal:5432/x") == ["app:s3cr3t"]
    key = "sk-proj-" + "a1B2" * 30
    aws = "aws_secret_access_key = " + "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    pem = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----"
    text = f"{key} then AKIAIOSFODNN7EXAMPLE and {aws} and {pem}"
    assert found(secrets, text) == [
        key,
        "AKIAIOSFODNN7EXAMPLE",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        pem,
    ]
    assert found(secrets, "sk-short, a skeleton key, AKIA123") == []


def test_the_deployments_own_patterns_and_words() -> None:
    assert found(patterns("TICKET", [r"\bACME-\d{5}\b"]), "see ACME-12345, ACME-1") == [
        "ACME-12345"
    ]
    hosts = words("HOSTNAME", ["db01.corp", "Contoso Ltd"])
    assert found(hosts, "contoso ltd runs DB01.corp and db01.corpus") == [
        "contoso ltd",
        "DB01.corp",
    ]


def test_placeholders_are_typed_numbered_and_the_same_for_the_same_value() -> None:
    scope = Redaction(builtin(DEFAULT_KINDS))
    first = scope.redact("I am ana@shop.com, card 4111 1111 1111 1111")
    second = scope.redact("ANA@shop.com again; bob@shop.com too; 4111111111111111")
    assert first == "I am <EMAIL_1>, card <CARD_1>"
    assert second == "<EMAIL_1> again; <EMAIL_2> too; <CARD_1>"
    assert scope.counts == {"EMAIL": 3, "CARD": 2}
    assert Redaction(builtin(DEFAULT_KINDS)).redact("bob@shop.com") == "<EMAIL_1>"  # per scope


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("https://user:pw@host.example/x with user@host.example", "<URL_CREDENTIALS_1>"),
        ("token sk-" + "x1" * 20 + " for 10.0.0.1", "<SECRET_1>"),
    ],
)
def test_overlaps_go_to_the_most_specific_kind(text: str, kept: str) -> None:
    assert kept in Redaction(builtin(DEFAULT_KINDS)).redact(text)


def test_a_document_is_masked_as_its_json_text_keys_numbers_and_context_too() -> None:
    from stream.redact.redactor import redacted_document

    scope = Redaction(builtin(DEFAULT_KINDS))
    document = {
        "customer": {"phone": "6502530000", "card": 4111111111111111},
        "env": {"aws_secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"},
        "ana.lopez@example.org": "sent",
        "count": 12,
    }
    masked, counts = redacted_document(document, scope.redacted)
    text = str(masked)
    assert "6502530000" not in text and "4111111111111111" not in text
    assert "wJalrXUtnFEMI" not in text and "ana.lopez" not in text
    assert masked["count"] == 12 and counts == {"PHONE": 1, "CARD": 1, "SECRET": 1, "EMAIL": 1}


CLEAN_TEXTS = [
    "logged at 2024-05-01 12:05:07 and 2024-06-02 13:00:00",
    "version: 1.2.3.4, installed 4.18.2.1, Chrome 120.0.6099.109, build 10.0.19045.3803",
    "Amazon order 112-3456789-0123456, INC-0012345, Order 0001234567",
    "ISBN 978-0-306-40615-7, FedEx 7489 2345 6789, USPS 9400 1000 0000 0000 0000 00",
    "Preis 1.234.567,89 €, a budget of 1 234 567",
    "sk-learn-is-a-library-for-machine-learning",
    "uuid 123e4567-e89b-12d3-a456-426614174000, sha 9fceb02d0ae598e95dc970b74767f19372d61af8",
]


@pytest.mark.parametrize("text", CLEAN_TEXTS)
def test_common_clean_text_is_left_alone(text: str) -> None:
    assert Redaction(builtin(DEFAULT_KINDS)).redact(text) == text


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("card 4111 1111 1111 1111 05/27 cvv 123", "card <CARD_1> 05/27 cvv 123"),
        ("card 4111111111111111 05/27", "card <CARD_1> 05/27"),
        ("card 4111.1111.1111.1111", "card <CARD_1>"),
        ("card 4111\u00a01111\u00a01111\u00a01111", "card <CARD_1>"),
        ("IBAN DE89 3704 0044 0532 0130 00 BIC COBADEFFXXX", "IBAN <IBAN_1> BIC COBADEFFXXX"),
        ("de89 3704 0044 0532 0130 00 EUR", "<IBAN_1> EUR"),
        ("DE89-3704-0044-0532-0130-00", "<IBAN_1>"),
        ("call 0049 30 12345678 or 0044 7911 123456", "call <PHONE_1> or <PHONE_2>"),
        ("call +44\u00a020\u00a07946\u00a00958", "call <PHONE_1>"),
        ("josé.núñez@ejemplo.es", "<EMAIL_1>"),
        ("redis://:hunter2!@redis:6379", "redis://<URL_CREDENTIALS_1>@redis:6379"),
        ("eyJhbGciOiJub25lIn0.eyJzdWIiOiIxMjM0NTY3ODkwIn0.", "<SECRET_1>"),
    ],
)
def test_real_formats_are_masked(text: str, masked: str) -> None:
    assert Redaction(builtin(DEFAULT_KINDS)).redact(text) == masked


def test_a_private_key_cut_short_is_masked_to_the_end_of_its_base64() -> None:
    text = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\nQ2hy [... 300 characters cut ...] x"
    assert Redaction(builtin(DEFAULT_KINDS)).redact(text).startswith("<SECRET_1>[...")


def test_long_texts_are_read_in_linear_time() -> None:
    import time

    scope = Redaction(builtin(DEFAULT_KINDS))
    started = time.process_time()
    scope.redact("%41" * 30_000)  # no @: no e-mail scan
    scope.redact("a%b" * 30_000 + "@x")  # a local part is at most 64 characters
    scope.redact(" ".join(str(n) for n in range(20_000)))  # a list of numbers, no phone
    assert time.process_time() - started < 2.0


def test_one_value_written_two_ways_is_one_placeholder() -> None:
    scope = Redaction([*builtin(DEFAULT_KINDS), words("CUSTOMER", ["Ana Lopez"])])
    said = scope.redact(
        "+44 20 7946 0958 / 020 7946 0958; 2001:db8::1 / 2001:DB8:0:0:0:0:0:1; "
        "Ana Lopez / ANA LOPEZ; DE89 3704 0044 0532 0130 00 / de89370400440532013000"
    )
    assert said == (
        "<PHONE_1> / <PHONE_1>; <IP_ADDRESS_1> / <IP_ADDRESS_1>; "
        "<CUSTOMER_1> / <CUSTOMER_1>; <IBAN_1> / <IBAN_1>"
    )
