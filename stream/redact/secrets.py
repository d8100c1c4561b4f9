"""Secrets by their published shapes: provider API keys by prefix, cloud access keys, source
host and chat tokens, JSON Web Tokens, PEM private keys.

Each shape is the one its issuer documents (OpenAI ``sk-``/``sk-proj-``; Anthropic
``sk-ant-``; AWS access key ids ``AKIA``/``ASIA`` + 16; GitHub ``ghp_``/``gho_``/``ghu_``/
``ghs_``/``ghr_`` and ``github_pat_``; Slack ``xoxb-``/``xoxp-``/... and its webhook URLs;
Google ``AIza`` + 35; Stripe ``sk_live_``/``rk_live_``; Hugging Face ``hf_``; GitLab
``glpat-``; a JWT is three base64url parts, the first two JSON objects ``eyJ``). A shape
that needs its context (AWS's 40-character secret key) is matched after its name.
"""

from __future__ import annotations

SECRET_SHAPES: dict[str, str] = {
    # a random key holds digits: "sk-learn-is-a-library" is no key
    "openai_or_anthropic_key": (
        r"\bsk-(?:proj-|svcacct-|admin-|ant-[a-z0-9]+-)?(?=[A-Za-z_-]*\d)[A-Za-z0-9_-]{20,}"
    ),
    "aws_access_key_id": r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b",
    "aws_secret_access_key": (
        r"(?i:aws_?secret_?access_?key|aws_?secret)[\"']?\s*[:=]\s*[\"']?"
        r"(?P<value>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"
    ),
    "github_token": r"\bgh[pousr]_[A-Za-z0-9]{36,255}\b",
    "github_fine_grained_token": r"\bgithub_pat_[A-Za-z0-9_]{22,255}\b",
    "gitlab_token": r"\bglpat-[A-Za-z0-9_-]{20,}(?![A-Za-z0-9_-])",
    "slack_token": r"\bxox[abposre]-[A-Za-z0-9-]{10,}",
    "slack_webhook": r"https://hooks\.slack\.com/services/[A-Za-z0-9/_-]{20,}",
    "google_api_key": r"\bAIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])",
    "stripe_key": r"\b(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{20,}\b",
    "hugging_face_token": r"\bhf_[A-Za-z0-9]{30,}\b",
    "jwt": r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*",  # alg none: no sig
    # to its END line, or (a block cut short) to the end of its base64 and headers
    "pem_private_key": (
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
        r"(?:[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|[A-Za-z0-9+/=\s:.,-]*)"
    ),
}
