"""The EKS bearer token against its published construction (aws-iam-authenticator / `aws eks get-token`).

k8s-aws-v1. + unpadded base64url( presigned https://sts.<region>.amazonaws.com/?Action=GetCallerIdentity
&Version=2011-06-15 with SigV4 query auth, X-Amz-Expires=60, signed headers host;x-k8s-aws-id ).
The signature is recomputed here from the SigV4 spec with hashlib/hmac, independent of botocore.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import urllib.parse
from typing import Any

from hyperpod_common import FAKE_ACCESS_KEY, FAKE_SECRET_KEY, REGION

from skyrl_nb.cluster.kube import EksTokenSource, eks_token


def _decode(token: str) -> urllib.parse.SplitResult:
    assert token.startswith("k8s-aws-v1.")
    body = token[len("k8s-aws-v1."):]
    assert "=" not in body and "+" not in body and "/" not in body  # base64url, padding stripped
    url = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()
    return urllib.parse.urlsplit(url)


def _sigv4_presigned_signature(url: urllib.parse.SplitResult, eks_cluster: str, secret: str) -> str:
    q = urllib.parse.parse_qsl(url.query, keep_blank_values=True)
    canonical_query = "&".join(
        f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
        for k, v in sorted(q) if k != "X-Amz-Signature")
    canonical_headers = f"host:{url.hostname}\nx-k8s-aws-id:{eks_cluster}\n"
    payload_hash = hashlib.sha256(b"").hexdigest()
    canonical_request = "\n".join(["GET", "/", canonical_query, canonical_headers, "host;x-k8s-aws-id", payload_hash])
    params = dict(q)
    amz_date = params["X-Amz-Date"]
    scope = f"{amz_date[:8]}/{REGION}/sts/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical_request.encode()).hexdigest()])

    def h(key: bytes, msg: str) -> bytes:
        return hmac.new(key, msg.encode(), hashlib.sha256).digest()

    k = h(("AWS4" + secret).encode(), amz_date[:8])
    for part in (REGION, "sts", "aws4_request"):
        k = h(k, part)
    return hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()


def test_token_matches_published_construction(boto_session: Any) -> None:
    token = eks_token("hp-eks", region=REGION, session=boto_session)
    url = _decode(token)
    params = dict(urllib.parse.parse_qsl(url.query))
    assert url.scheme == "https" and url.hostname == f"sts.{REGION}.amazonaws.com" and url.path in ("", "/")
    assert params["Action"] == "GetCallerIdentity" and params["Version"] == "2011-06-15"
    assert params["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256"
    assert params["X-Amz-Expires"] == "60"
    assert params["X-Amz-SignedHeaders"] == "host;x-k8s-aws-id"
    assert params["X-Amz-Credential"].startswith(f"{FAKE_ACCESS_KEY}/") and params["X-Amz-Credential"].endswith(
        f"/{REGION}/sts/aws4_request")
    assert params["X-Amz-Signature"] == _sigv4_presigned_signature(url, "hp-eks", FAKE_SECRET_KEY)
    # The token carries a signature, never the secret key.
    assert FAKE_SECRET_KEY not in token and FAKE_SECRET_KEY not in base64.urlsafe_b64decode(
        token[11:] + "=" * (-len(token[11:]) % 4)).decode()


def test_signature_binds_the_cluster_name(boto_session: Any) -> None:
    url = _decode(eks_token("hp-eks", region=REGION, session=boto_session))
    sig = dict(urllib.parse.parse_qsl(url.query))["X-Amz-Signature"]
    assert sig != _sigv4_presigned_signature(url, "another-cluster", FAKE_SECRET_KEY)


def test_token_source_refreshes_before_expiry(boto_session: Any) -> None:
    now = [1_000_000.0]
    src = EksTokenSource("hp-eks", region=REGION, session=boto_session, lifetime_s=14 * 60,
                         refresh_margin_s=60, clock=lambda: now[0])
    first = src.token()
    assert src.refreshes == 1 and src.expires_at == now[0] + 14 * 60
    now[0] += 12 * 60  # still more than the margin left: cached
    assert src.token() == first and src.refreshes == 1
    now[0] += 61  # inside the last minute: a new token is made before the old one expires
    src.token()
    assert src.refreshes == 2 and src.expires_at > now[0] + 13 * 60
    assert "redacted" in repr(src) and "k8s-aws-v1" not in repr(src) and "redacted" in src._repr_html_()


def test_token_source_signs_a_fresh_date(boto_session: Any, monkeypatch: Any) -> None:
    """A refreshed token is a new presigned URL (new X-Amz-Date), not the cached string."""
    import datetime

    import botocore.auth

    src = EksTokenSource("hp-eks", region=REGION, session=boto_session, lifetime_s=0, refresh_margin_s=0)
    a = src.token()
    real = datetime.datetime

    class Later(real):
        @classmethod
        def utcnow(cls) -> datetime.datetime:  # botocore signs with utcnow()
            return real.utcnow() + datetime.timedelta(minutes=5)

        @classmethod
        def now(cls, tz: Any = None) -> datetime.datetime:
            return real.now(tz) + datetime.timedelta(minutes=5)

    monkeypatch.setattr(botocore.auth.datetime, "datetime", Later)
    b = src.token()
    date = lambda t: dict(urllib.parse.parse_qsl(_decode(t).query))["X-Amz-Date"]  # noqa: E731
    assert a != b and date(a) < date(b)
