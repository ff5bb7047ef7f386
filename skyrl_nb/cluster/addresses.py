"""Where a Ray cluster answers and how to authenticate to it: addresses (``http://``, ``ray://``, a module's own
scheme), the cluster a Studio Space is attached to, the bearer token (argument, ``RAY_AUTH_TOKEN`` or Ray's
token file) and the dashboard link a person clicks (SageMaker Studio's proxy path inside Studio)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

#: Where an attached cluster's address is looked for, in order: the variables Ray's own ``ray job submit``
#: reads (Ray's job SDK: ``RAY_API_SERVER_ADDRESS``, then ``RAY_ADDRESS``). That Studio sets one of them in
#: a Space attached to a Ray cluster is an assumption: AWS documents that ``ray.init()`` and ``ray job submit``
#: reach the cluster from such a Space, not how (docs/hyperpod.md, "Attached Spaces").
ATTACHED_ENV = ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS")
DASHBOARD_PORT = 8265


def studio_proxy_url(port: int) -> str | None:
    """The URL under which Studio's Jupyter proxy serves `port` on this host, or None outside Studio.

    Detection lives in `skyrl_nb.studio` (resource-metadata file and environment).
    """
    from skyrl_nb import studio

    return studio.proxy_url(port)


def display_dashboard_url(address: str) -> str:
    """The Ray dashboard URL a browser should open: Studio's proxy path for a local port in Studio."""
    m = re.match(r"^https?://(127\.0\.0\.1|localhost|0\.0\.0\.0)(?::(\d+))?/?$", address)
    if m:
        proxied = studio_proxy_url(int(m.group(2) or 80))
        if proxied:
            return proxied
    return address.rstrip("/") + "/"


def read_token_file(path: str | os.PathLike[str]) -> str | None:
    """The token in `path` (whitespace stripped), or None when the file is missing or empty."""
    try:
        token = Path(path).expanduser().read_text().strip()
    except OSError:
        return None
    return token or None


def find_token(token: str | None = None) -> str | None:
    """A Ray auth token: `token`, else `RAY_AUTH_TOKEN`, else `RAY_AUTH_TOKEN_PATH`, else `~/.ray/auth_token`."""
    if token:
        return token
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"].strip()
    if os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return read_token_file(os.environ["RAY_AUTH_TOKEN_PATH"])
    return read_token_file(Path.home() / ".ray" / "auth_token")


def normalize_address(address: str) -> str:
    """`host:port` or `http(s)://host:port[/]` -> `http(s)://host:port` (the dashboard HTTP address).

    A Ray module-hook address (``sagemaker_ray://cluster/namespace``: Ray's job client imports the module
    named by the scheme to reach the cluster) is kept as it is.
    """
    address = address.strip()
    if address.startswith("ray://"):
        raise ValueError(
            f"address {address!r} is a Ray Client address; give the dashboard HTTP address, e.g. http://host:8265"
        )
    if module_address(address):
        return address.rstrip("/")
    if not re.match(r"^https?://", address):
        address = "http://" + address
    return address.rstrip("/")


def module_address(address: str) -> bool:
    """Whether ``address`` is ``<module>://...`` for a Ray job-client module hook (not http, https or ray)."""
    m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)://", address)
    return bool(m) and m.group(1).lower() not in ("http", "https", "ray")


def dashboard_address(address: str) -> str:
    """The dashboard HTTP address for any address Ray accepts for a cluster: ``http(s)://`` as it is,
    ``ray://host:10001`` (Ray Client) or ``host:6379`` (GCS) -> ``http://host:8265`` (the dashboard's default
    port on the head), ``host:8265`` or a bare host -> ``http://host:8265``.

    >>> dashboard_address("ray://ray-head.team-a.svc:10001"), dashboard_address("10.0.0.5:6379")
    ('http://ray-head.team-a.svc:8265', 'http://10.0.0.5:8265')
    """
    address = address.strip()
    if re.match(r"^https?://", address) or module_address(address):
        return normalize_address(address)
    host = re.sub(r"^ray://", "", address).split("/")[0]
    host = host.rsplit(":", 1)[0] if re.search(r":\d+$", host) else host
    return f"http://{host}:{DASHBOARD_PORT}"


def attached_address(environ: Mapping[str, str] | None = None) -> str | None:
    """The dashboard address of the Ray cluster this Space is attached to (:data:`ATTACHED_ENV`), or None.
    ``auto`` and ``local`` (a cluster on this machine, as ``ray.init`` reads them) do not count."""
    env = os.environ if environ is None else environ
    for var in ATTACHED_ENV:
        value = (env.get(var) or "").strip()
        if value and value not in ("auto", "local"):
            return dashboard_address(value)
    return None


def require_attached_address() -> str:
    """:func:`attached_address`, or a one-line ValueError saying what ``connect()`` needs instead."""
    address = attached_address()
    if address is None:
        raise ValueError("connect() without an address looks for the Ray cluster this Studio Space is attached to "
                         f"({' or '.join(ATTACHED_ENV)}), and none is set: attach the Space to a Ray cluster, or give "
                         "the dashboard address, e.g. connect('http://<head>:8265')")
    return address
