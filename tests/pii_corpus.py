"""Labelled chat turns for the redaction detectors (issue 47): personal data made by the
``faker`` package in several locales, and secrets in each published shape, embedded in
realistic turns with where each value is; and clean turns (the bundled samples' texts, code,
order numbers, dates, version strings, prices) where nothing should be found.

Phone numbers are faker's, kept where libphonenumber finds the number possible, each written
as faker wrote it and in the national and international formats; a number libphonenumber
deems impossible is no phone number of any region. Everything is seeded: the corpus is the
same on every run.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass
from pathlib import Path

import orjson
import phonenumbers
from faker import Faker

LOCALES = {"en_US": "US", "en_GB": "GB", "de_DE": "DE", "fr_FR": "FR", "es_ES": "ES", "it_IT": "IT", "nl_NL": "NL"}  # fmt: skip

TURNS = (
    "Hi, this is about my order. You can reach me at {v} if anything comes up.",
    "My details: {v}. Please update the account.",
    "Can you send the invoice to {v}? Thanks!",
    "I tried twice already ({v}) and it still fails.",
    'The customer wrote: "please use {v} from now on"',
    "{v} is what I have on file, is that right?",
    "Sure, here it is:\n{v}\nLet me know.",
    "ok so basically {v} - does that help",
)


@dataclass(frozen=True)
class Labelled:
    """A turn and the values in it: (kind, value)."""

    text: str
    values: tuple[tuple[str, str], ...]


def _phone(fake: Faker, region: str, rng: random.Random) -> str | None:
    raw = fake.phone_number()
    try:
        number = phonenumbers.parse(raw, region)
    except phonenumbers.NumberParseException:
        return None
    if not phonenumbers.is_possible_number(number):
        return None
    written = rng.choice(("as_faker", "national", "international", "e164"))
    if written == "as_faker":
        if not str(raw).isdigit():
            return str(raw)
        written = "national"  # a bare run of digits is a phone number only in context
    fmt = {
        "national": phonenumbers.PhoneNumberFormat.NATIONAL,
        "international": phonenumbers.PhoneNumberFormat.INTERNATIONAL,
        "e164": phonenumbers.PhoneNumberFormat.E164,
    }[written]
    shown = str(phonenumbers.format_number(number, fmt))
    if shown.isdigit():  # a national format without a separator: a bare run of digits
        shown = str(
            phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.INTERNATIONAL)
        )
    return shown


CARD_TYPES = ("visa16", "visa13", "visa19", "mastercard", "amex", "discover", "jcb15", "jcb16", "diners", "maestro")  # fmt: skip


def _card(fake: Faker, rng: random.Random) -> str:
    number = str(fake.credit_card_number(card_type=rng.choice(CARD_TYPES)))
    while number.startswith("0"):  # faker's Maestro "0604" is no card network's range
        number = str(fake.credit_card_number(card_type=rng.choice(CARD_TYPES)))
    style = rng.choice(("plain", "spaced", "dashed"))
    if style == "plain":
        return number
    groups = [number[i : i + 4] for i in range(0, len(number), 4)]
    return (" " if style == "spaced" else "-").join(groups)


def _iban(fake: Faker, rng: random.Random) -> str:
    value = str(fake.iban())
    if rng.random() < 0.5:
        return " ".join(value[i : i + 4] for i in range(0, len(value), 4))
    return value


def _token(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def secret(rng: random.Random) -> str:
    """One secret in a published shape."""
    alnum = string.ascii_letters + string.digits
    b64url = alnum + "-_"
    shapes = [
        lambda: "sk-" + _token(rng, alnum, 48),
        lambda: "sk-proj-" + _token(rng, b64url, 120),
        lambda: "sk-ant-api03-" + _token(rng, b64url, 93) + "AA",
        lambda: "AKIA" + _token(rng, string.ascii_uppercase + string.digits, 16),
        lambda: "aws_secret_access_key = " + _token(rng, alnum + "/+", 40),
        lambda: "ghp_" + _token(rng, alnum, 36),
        lambda: "github_pat_" + _token(rng, alnum + "_", 82),
        lambda: "xoxb-" + "-".join(_token(rng, string.digits, 12) for _ in range(2)) + "-" + _token(rng, alnum, 24),
        lambda: "AIza" + _token(rng, b64url, 35),
        lambda: "sk_live_" + _token(rng, alnum, 24),
        lambda: "hf_" + _token(rng, alnum, 34),
        lambda: "glpat-" + _token(rng, b64url, 20),
        lambda: "eyJhbGciOiJIUzI1NiJ9.eyJ" + _token(rng, b64url, 40) + "." + _token(rng, b64url, 43),
        lambda: "-----BEGIN RSA PRIVATE KEY-----\n"
        + "\n".join(_token(rng, alnum + "+/", 64) for _ in range(4))
        + "\n-----END RSA PRIVATE KEY-----",
    ]  # fmt: skip
    return rng.choice(shapes)()


def _value(kind: str, fake: Faker, region: str, rng: random.Random) -> str | None:
    """One value of ``kind`` as ``fake``'s locale writes it (None: no phone number came)."""
    if kind == "EMAIL":
        return str(fake.email())
    if kind == "PHONE":
        return _phone(fake, region, rng)
    if kind == "CARD":
        return _card(fake, rng)
    if kind == "IBAN":
        return _iban(fake, rng)
    if kind == "IP_ADDRESS":
        return str(fake.ipv4() if rng.random() < 0.7 else fake.ipv6())
    return secret(rng)


def labelled_turns(count: int, seed: int = 47) -> list[Labelled]:
    """``count`` turns, each with one or two values of the structured kinds or a secret."""
    rng = random.Random(seed)
    fakes = {locale: Faker(locale) for locale in LOCALES}
    for i, fake in enumerate(fakes.values()):
        fake.seed_instance(seed + i)
    turns: list[Labelled] = []
    while len(turns) < count:
        locale = rng.choice(list(LOCALES))
        fake = fakes[locale]
        values: list[tuple[str, str]] = []
        for _ in range(rng.choice((1, 1, 2))):
            kind = rng.choice(("EMAIL", "PHONE", "CARD", "IBAN", "IP_ADDRESS", "SECRET"))
            value = _value(kind, fake, LOCALES[locale], rng)
            if value is not None:
                values.append((kind, value))
        if not values:
            continue
        shown = " and ".join(v for _, v in values)
        turns.append(Labelled(rng.choice(TURNS).format(v=shown), tuple(values)))
    return turns


CLEAN = (
    "Your order #{n} ships on {date}; tracking ORD-{year}-{m}.",
    "Upgraded to version {a}.{b}.{c} and then v{a}.{b}.{c}.{d}, still broken.",
    "It costs ${p}.{cents} or EUR {p},{cents} (was {big} in total last year).",
    "Run `pip install foo=={a}.{b}.{c}` then `python -m foo --port 8{a}{b}{c}`.",
    "def f(x):\n    return x * {n} + {m}  # see ticket {year}-{n}",
    "Meeting at {h}:{mm} on {date}, room {n}.",
    "The build {big} finished in {p}.{cents}s; {n} tests, {m} skipped.",
    "Invoice {year}{n} due {date2}; reference {n}-{m}.",
    "Section {a}.{b} of the manual, page {n}, figure {a}.{b}.{c}.",
    "Scores: {a}/{b}, {c}/{d}, ratio {a}:{b}, at {h}:{mm}:{ss} UTC.",
)


def clean_turns(count: int, seed: int = 48, samples: Path | None = None) -> list[str]:
    """``count`` turns with no personal data or secret: templates of the numbers chat turns
    carry (orders, dates, versions, prices, code), then the bundled samples' texts."""
    rng = random.Random(seed)
    out: list[str] = []
    if samples is not None:
        for path in sorted(samples.glob("*.jsonl")):
            for line in path.read_text().splitlines():
                out.extend(_texts(orjson.loads(line)))
    while len(out) < count:
        year = rng.randint(2015, 2027)
        out.append(
            rng.choice(CLEAN).format(
                n=rng.randint(10, 999_999),
                m=rng.randint(10, 99_999),
                year=year,
                date=f"{year}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                date2=f"{rng.randint(1, 28):02d}.{rng.randint(1, 12):02d}.{year}",
                a=rng.randint(0, 20),
                b=rng.randint(0, 30),
                c=rng.randint(0, 99),
                d=rng.randint(0, 999),
                p=rng.randint(1, 99_999),
                cents=f"{rng.randint(0, 99):02d}",
                big=rng.randint(1_000_000, 9_999_999_999),
                h=rng.randint(0, 23),
                mm=f"{rng.randint(0, 59):02d}",
                ss=f"{rng.randint(0, 59):02d}",
            )
        )
    return out[:count] if samples is None else out


def _texts(value: object) -> list[str]:
    if isinstance(value, str):
        return [value] if len(value) > 3 else []
    if isinstance(value, dict):
        return [t for v in value.values() for t in _texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v)]
    return []
