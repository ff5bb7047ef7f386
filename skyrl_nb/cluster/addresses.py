"""Where a Ray cluster answers and how to authenticate to it: addresses (``http://``, ``ray://``, a module's own
scheme), the bearer token (argument, ``RAY_AUTH_TOKEN`` or Ray's token file) and the dashboard link a person
clicks (SageMaker Studio's proxy path inside Studio)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass


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
