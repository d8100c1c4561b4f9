"""The detectors: each finds the spans of one kind of personal data or secret in a text,
checksummed where the data has a checksum (issue 47, item 2).

- ``EMAIL``: an address of a dotted domain with a top-level domain of letters;
- ``PHONE``: what libphonenumber (the ``phonenumbers`` package) finds as a possible number for
  one of the configured regions (international formats are found whatever the region), kept
  where it is written as a phone number is (an international prefix, parentheses, three or
  more digit groups); a bare run of digits counts only where the number is valid and starts
  with its trunk prefix or follows a word such as phone, call or mobile (an order number, a
  build number or an amount is not a phone number), and a date or a time is never one;
- ``CARD``: 12 to 19 digits (spaces or dashes between groups) that pass the Luhn check and
  start as a card network's numbers do;
- ``IBAN``: a country code, two check digits and the account (spaces between groups allowed),
  of the country's length where it is known, whose mod-97 check is 1 (ISO 13616);
- ``IP_ADDRESS``: IPv4 and IPv6 addresses that the ``ipaddress`` module accepts (a version
  string such as ``v1.2.3.4`` is not one);
- ``URL_CREDENTIALS``: the ``user:password`` of a URL;
- ``SECRET``: keys and tokens by their published shapes (``secrets.py``);
- the deployment's own kinds: patterns (regular expressions) and word lists (customer names,
  internal hostnames), matched as whole words without case.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import phonenumbers
from phonenumbers import Leniency, PhoneNumberMatcher

from .secrets import SECRET_SHAPES

STRUCTURED = ("EMAIL", "PHONE", "CARD", "IBAN", "IP_ADDRESS", "URL_CREDENTIALS")
SECRET = "SECRET"
DEFAULT_KINDS = (*STRUCTURED, SECRET)
DEFAULT_REGIONS = ("US", "GB", "DE", "FR", "ES", "IT", "NL", "IN", "AU", "CA", "BR", "JP")


@dataclass(frozen=True, slots=True)
class Finding:
    """One value found: its kind and where it is in the text."""

    kind: str
    start: int
    end: int


Detector = Callable[[str], Iterable[Finding]]

# a local part of at most 64 characters (RFC 5321), letters of any script; a domain of
# labels of any script and a top-level domain of letters (bounded: no quadratic scan)
_EMAIL = re.compile(
    r"(?<![\w.%+-])[^\W_][\w.%+-]{0,63}@"
    r"(?:[^\W_](?:[\w-]{0,61}[^\W_])?\.){1,8}[^\W\d_]{2,63}(?![\w-])"
)


def emails(text: str) -> Iterable[Finding]:
    if "@" not in text:
        return
    for found in _EMAIL.finditer(text):
        yield Finding("EMAIL", found.start(), found.end())


_DATE = re.compile(
    r"^(?:\d{4}[-/.]\d{1,2}[-/.]\d{1,2}|\d{1,2}[-/.]\d{1,2}[-/.]\d{2,4})(?:[ T]\d{1,2}(?::\d{2})?)?$"
)
_DATE_FIRST = re.compile(r"^(?:\d{4}[-/.]\d{1,2}[-/.]\d{1,2}|\d{1,2}[-/.]\d{1,2}[-/.]\d{4})\b")
# thousands grouped by spaces (1 234 567), a version's or an id's dotted or dashed groups
# with a one-digit group past the first (10.0.19045.3803, ISBN 978-0-306-40615-7)
_THOUSANDS = re.compile(r"^\d{1,2}(?:[ \u00a0\u202f]\d{3})+$")
_SHORT_GROUP = re.compile(r"[.\-]\d[.\-]|[.\-]\d$")
_GROUPS = re.compile(r"\d+")


_PHONE_WORDS = re.compile(
    r"(?:phone|tel\b|telephone|call|mobile|cell|number|reach|text me|whatsapp|fax|contact|"
    r"ring|landline|handy|telefon|t[ée]l[ée]phone|portable|tel[ée]fono|m[óo]vil|cellulare)"
    r"[^\d\n]{0,25}$",
    re.IGNORECASE,
)
_MONEY = re.compile(r"(?:[$€£¥₹]|\b(?:EUR|USD|GBP|CHF|JPY|INR)\b)\s*$", re.IGNORECASE)
_MONEY_AFTER = re.compile(
    r"^(?:[.,]\d{1,2})?\s*(?:[$€£¥₹]|(?:EUR|USD|GBP|CHF|JPY|INR|euros?|dollars?)\b)", re.I
)


def _not_a_phones_start(before: str) -> bool:
    """Digits that follow a letter, ``#``, ``_`` or ``/`` (an id's, a path's), or a digit and
    ``.``, ``:`` or ``-`` (a version's, a time's, a range's): no phone number starts there.
    After a word and a colon or a dot (``Tel:``, ``Tel.``) one may."""
    last = before[-1:]
    if last.isalnum() or last in ("#", "_", "/"):
        return True
    if last == "-":  # an id's dash (INC-0012345, 12-34)
        return before[-2:-1].isalnum()
    return last in (".", ":") and before[-2:-1].isdigit()


def _written_as_a_phone(raw: str) -> bool:
    """An international prefix, parentheses around an area code, or three or more digit
    groups: how people write phone numbers, not order numbers or amounts."""
    stripped = raw.strip()
    if stripped.startswith("+") or re.match(r"00[1-9]", stripped) or "(" in stripped:
        return True
    groups = _GROUPS.findall(stripped)
    # groups of four only (a tracking or card-like number), no trunk prefix: not a phone's
    if len(groups) >= 3 and all(len(g) == 4 for g in groups) and not stripped.startswith("0"):
        return False
    return len(groups) >= 3


def phones(regions: Sequence[str] = DEFAULT_REGIONS) -> Detector:
    """The phone numbers of ``regions`` (ISO 3166 codes; international ones whatever the
    region): a possible number written as a phone number is, or a valid one that starts
    with its trunk prefix or follows a word such as phone, call or mobile."""

    def find(text: str) -> Iterable[Finding]:
        if sum(c.isdigit() for c in text) < 7:
            return
        seen: set[tuple[int, int]] = set()
        for candidate in _PHONE_LIKE.finditer(text):  # libphonenumber reads only these
            chunk, at = candidate.group(), candidate.start()
            before = text[max(0, at - 30) : at]
            digits = sum(c.isdigit() for c in re.split(r"x|ext", chunk)[0])
            if (
                not 7 <= digits <= 15  # E.164's most (an extension apart); a list of numbers
                or len(chunk) > 40
                or _DATE.match(chunk)
                or _DATE_FIRST.match(chunk)
                or _not_a_phones_start(before)
                or _MONEY.search(before)
                or _MONEY_AFTER.match(text[candidate.end() :])
                or (_THOUSANDS.match(chunk) and not _PHONE_WORDS.search(before))
                or _SHORT_GROUP.search(chunk.split("x")[0].rstrip())
                # what no check below would keep: a bare run, led by no trunk prefix or word
                or not (
                    _written_as_a_phone(chunk)
                    or re.match(r"0[1-9]", chunk)
                    or _PHONE_WORDS.search(before)
                )
            ):
                continue
            # an international number reads the same in every region: one is asked (for 00,
            # one whose international prefix it is)
            asked = regions
            if chunk.startswith("+"):
                asked = regions[:1]
            elif chunk.startswith("00"):
                asked = ("DE",)
            yield from _phones_in(text, chunk, at, asked, seen)

    return find


# where a phone number may be: digits with the separators, parentheses, plus and extension
# phone numbers are written with (libphonenumber's matcher is slow over long texts)
_PHONE_LIKE = re.compile(
    r"[+(]?\d(?:[\d \t\u00a0\u202f().\u2010-\u2013]|(?<! )[-/](?! )|(?:x|ext\.? ?)(?=\d))*"
    r"\d\)?"
)  # a dash or slash with spaces around it parts two numbers (``+44 ... / 020 ...``)


def _phones_in(
    text: str, chunk: str, at: int, regions: Sequence[str], seen: set[tuple[int, int]]
) -> Iterable[Finding]:
    """The phone numbers in ``chunk`` (at ``at`` of ``text``), read with the text around."""
    for region in regions:
        for match in PhoneNumberMatcher(chunk, region, leniency=Leniency.POSSIBLE):
            start, end = at + match.start, at + match.end
            raw = match.raw_string
            if (start, end) in seen or sum(c.isdigit() for c in raw) < 7 or _DATE.match(raw):
                continue
            before = text[max(0, start - 30) : start]
            if _not_a_phones_start(before):
                continue
            if _MONEY.search(before) or _MONEY_AFTER.match(text[end:]):
                continue  # an amount
            if _written_as_a_phone(raw) or (
                phonenumbers.is_valid_number(match.number)
                and (raw.startswith("0") or _PHONE_WORDS.search(before))
            ):
                seen.add((start, end))
                yield Finding("PHONE", start, end)


_CARD = re.compile(r"(?<![\d+-])\d(?:[ .\-\u00a0\u202f]?\d){11,30}(?![\d-])")  # bounded: linear
_CARD_GROUP = re.compile(r"\d+")
# the first digits of the card networks' numbers: Visa 4, Mastercard 51-55 and 2221-2720,
# American Express 34 and 37, Discover 6011, 644-649 and 65, JCB 35 (and its older 15-digit
# 1800 and 2131), Diners Club 300-305, 36 and 38, UnionPay 62, Maestro 50 and 56-69
_NETWORK = re.compile(
    r"^(?:4|5[1-5]|2(?:22[1-9]|2[3-9]\d|[3-6]\d\d|7[01]\d|720)|3[47]|6011|64[4-9]|65"
    r"|35|1800|2131|30[0-5]|3[68]|62|5[06-9]|6\d)"
)


def luhn(digits: str) -> bool:
    """The Luhn check (ISO/IEC 7812-1): every second digit from the right doubled."""
    total = 0
    for i, d in enumerate(reversed(digits)):
        n = int(d) * (2 if i % 2 else 1)
        total += n - 9 if n > 9 else n
    return total % 10 == 0


# the lengths under 16 only some networks issue: Maestro 12-19, Visa 13, Diners Club 14,
# American Express and the older JCB 15
_SHORT = {
    12: re.compile(r"^(?:5[06-9]|6)"),
    13: re.compile(r"^(?:4|5[06-9]|6)"),
    14: re.compile(r"^(?:30[0-5]|3[68]|5[06-9]|6)"),
    15: re.compile(r"^(?:3[47]|1800|2131|5[06-9]|6)"),
}


def card_number(digits: str) -> bool:
    """12 to 19 digits of a network's range and lengths that pass the Luhn check."""
    short = _SHORT.get(len(digits))
    if short is not None and not short.match(digits):
        return False
    return 12 <= len(digits) <= 19 and bool(_NETWORK.match(digits)) and luhn(digits)


def cards(text: str) -> Iterable[Finding]:
    """Card numbers; a run of digit groups longer than one (a card and its expiry, ``4111
    1111 1111 1111 05/27``) is read in windows of whole groups, the longest first."""
    for found in _CARD.finditer(text):
        groups = [(m.start(), m.end()) for m in _CARD_GROUP.finditer(found.group())]
        window = _card_window(found.group(), groups)
        if window is not None:
            yield Finding("CARD", found.start() + window[0], found.start() + window[1])


def _card_window(run: str, groups: list[tuple[int, int]]) -> tuple[int, int] | None:
    if len(groups) == 1:
        digits = run
        if card_number(digits):
            return 0, len(run)
        return None
    for size in range(len(groups), 0, -1):
        for first in range(len(groups) - size + 1):
            start, end = groups[first][0], groups[first + size - 1][1]
            if card_number(re.sub(r"\D", "", run[start:end])):
                return start, end
    return None


_IBAN = re.compile(r"\b[A-Za-z]{2}\d{2}(?:[ \-\u00a0]?[A-Za-z0-9]){11,40}")
# the IBAN length of the countries of the IBAN registry most traffic comes from (others:
# 15 to 34, the standard's bounds)
IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AT": 20, "BE": 16, "BG": 22, "BH": 22, "BR": 29, "CH": 21, "CY": 28,
    "CZ": 24, "DE": 22, "DK": 18, "EE": 20, "ES": 24, "FI": 18, "FR": 27, "GB": 22, "GR": 27,
    "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IS": 26, "IT": 27, "KW": 30, "KZ": 20, "LI": 21,
    "LT": 20, "LU": 20, "LV": 21, "MC": 27, "MT": 31, "NL": 18, "NO": 15, "PK": 24, "PL": 28,
    "PT": 25, "QA": 29, "RO": 24, "RS": 22, "SA": 24, "SE": 24, "SI": 19, "SK": 24, "SM": 27,
    "TR": 26, "UA": 29,
}  # fmt: skip


def iban_valid(text: str) -> bool:
    """ISO 13616: the country's length, and the number (country and check digits moved to
    the end, letters as 10-35) mod 97 is 1."""
    compact = _compact(text)
    expected = IBAN_LENGTHS.get(compact[:2])
    if (expected is not None and len(compact) != expected) or not 15 <= len(compact) <= 34:
        return False
    moved = compact[4:] + compact[:4]
    return int("".join(str(int(c, 36)) for c in moved)) % 97 == 1


def ibans(text: str) -> Iterable[Finding]:
    """IBANs in any case, grouped by spaces or dashes; what follows one (``BIC ...``,
    ``EUR``) is left out: the country's length is taken, else the longest that checks."""
    position = 0
    while (found := _IBAN.search(text, position)) is not None:
        position = found.start() + 1  # the next may start inside this run's words
        run = found.group()
        places = [i for i, c in enumerate(run) if c.isalnum()]
        country = run[:2].upper()
        lengths = [IBAN_LENGTHS[country]] if country in IBAN_LENGTHS else range(34, 14, -1)
        for length in lengths:
            if length > len(places):
                continue
            end = places[length - 1] + 1
            if (end == len(run) or not run[end].isalnum()) and iban_valid(_compact(run[:end])):
                yield Finding("IBAN", found.start(), found.start() + end)
                position = found.start() + end
                break


def _compact(text: str) -> str:
    return "".join(c for c in text if c.isalnum()).upper()


_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?!\w|\.\d)")
_IPV6 = re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")
_VERSION_BEFORE = re.compile(
    r"(?:\bv|\b(?:version|ver\.?|release|build|installed|upgraded?|updated?|sdk|"
    r"chrome|firefox|edge|safari|node|python|java)\s*[:=]?\s*)$",
    re.IGNORECASE,
)


def ip_addresses(text: str) -> Iterable[Finding]:
    for found in _IPV4.finditer(text):
        if _VERSION_BEFORE.search(text[max(0, found.start() - 14) : found.start()]):
            continue
        try:
            ipaddress.IPv4Address(found.group())
        except ValueError:
            continue
        yield Finding("IP_ADDRESS", found.start(), found.end())
    for found in _IPV6.finditer(text):
        value = found.group()
        if value.count(":") < 2 or sum(c in "0123456789abcdefABCDEF" for c in value) < 4:
            continue  # a time, a ratio, a bare "::"
        try:
            ipaddress.IPv6Address(value)
        except ValueError:
            continue
        yield Finding("IP_ADDRESS", found.start(), found.end())


_URL_CREDENTIALS = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://([^\s/:@]*:[^\s/@]+)@[^\s/]")


def url_credentials(text: str) -> Iterable[Finding]:
    for found in _URL_CREDENTIALS.finditer(text):
        yield Finding("URL_CREDENTIALS", found.start(1), found.end(1))


_SECRET_SHAPES = [re.compile(shape) for shape in SECRET_SHAPES.values()]


def secrets(text: str) -> Iterable[Finding]:
    for shape in _SECRET_SHAPES:
        for found in shape.finditer(text):
            group = "value" if "value" in shape.groupindex else 0
            yield Finding(SECRET, found.start(group), found.end(group))


def patterns(kind: str, expressions: Sequence[str]) -> Detector:
    """The deployment's own regular expressions, each match of kind ``kind``."""
    compiled = [re.compile(expression) for expression in expressions]

    def find(text: str) -> Iterable[Finding]:
        for expression in compiled:
            for found in expression.finditer(text):
                if found.end() > found.start():
                    yield Finding(kind, found.start(), found.end())

    return find


def words(kind: str, listed: Iterable[str]) -> Detector:
    """The deployment's word list (customer names, internal hostnames), as whole words
    without case, the longest first."""
    ordered = sorted({w.strip() for w in listed if w.strip()}, key=len, reverse=True)
    if not ordered:
        return lambda text: ()
    expression = re.compile(
        r"(?<!\w)(?:" + "|".join(re.escape(w) for w in ordered) + r")(?!\w)", re.IGNORECASE
    )

    def find(text: str) -> Iterable[Finding]:
        for found in expression.finditer(text):
            yield Finding(kind, found.start(), found.end())

    return find


def builtin(kinds: Iterable[str], regions: Sequence[str] = DEFAULT_REGIONS) -> list[Detector]:
    """The shipped detectors of ``kinds``."""
    made: dict[str, Detector] = {
        "EMAIL": emails,
        "PHONE": phones(regions),
        "CARD": cards,
        "IBAN": ibans,
        "IP_ADDRESS": ip_addresses,
        "URL_CREDENTIALS": url_credentials,
        SECRET: secrets,
    }
    return [made[kind] for kind in kinds]
