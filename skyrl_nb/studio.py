"""Where the notebook runs: SageMaker Studio detection, identity, and Studio proxy links.

>>> from skyrl_nb import studio
>>> studio.info()                 # StudioInfo(in_studio=False) on a laptop          # doctest: +SKIP
>>> studio.proxy_url(8265)        # Studio's Jupyter proxy URL for a local port, or None  # doctest: +SKIP
>>> studio.execution_role()       # the IAM role ARN (sagemaker SDK when installed, else STS)  # doctest: +SKIP

Studio writes ``/opt/ml/metadata/resource-metadata.json`` into every app (``DomainId``,
``UserProfileName``, ``SpaceName``, ``AppType``, ``ResourceArn``...) and sets ``SAGEMAKER_SPACE_NAME``
and ``AWS_REGION`` in the environment. ``SKYRL_NB_STUDIO_METADATA`` points at another file (tests);
``SKYRL_NB_STUDIO=0`` turns detection off.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

METADATA_PATH = "/opt/ml/metadata/resource-metadata.json"

#: URL path segment of Studio's Jupyter proxy per app type.
_PROXY_PREFIX = {"JupyterLab": "jupyterlab", "CodeEditor": "codeeditor", "JupyterServer": "jupyter",
                 "KernelGateway": "jupyter"}


@dataclass(frozen=True)
class StudioInfo:
    """The Studio app the kernel runs in (all ``None`` outside Studio)."""

    in_studio: bool
    domain_id: str | None = None
    user_profile: str | None = None
    space: str | None = None
    app_type: str | None = None
    region: str | None = None
    resource_arn: str | None = None
    execution_role_arn: str | None = None

    @property
    def base_url(self) -> str | None:
        """``https://<domain>.studio.<region>.sagemaker.aws`` when domain and region are known."""
        if self.domain_id and self.region:
            return f"https://{self.domain_id}.studio.{self.region}.sagemaker.aws"
        return None

    def proxy_path(self, port: int) -> str:
        """The same-origin path of Studio's Jupyter proxy for ``port`` (``/jupyterlab/default/proxy/P/``)."""
        prefix = _PROXY_PREFIX.get(self.app_type or "JupyterLab", "jupyterlab")
        return f"/{prefix}/default/proxy/{int(port)}/"

    def __repr__(self) -> str:
        if not self.in_studio:
            return "StudioInfo(in_studio=False)"
        return (f"StudioInfo(domain={self.domain_id!r}, user_profile={self.user_profile!r}, space={self.space!r}, "
                f"app={self.app_type!r}, region={self.region!r})")

    def _repr_html_(self) -> str:
        if not self.in_studio:
            return "<i>Not running in SageMaker Studio</i>"
        rows = "".join(f"<tr><td>{k}</td><td><code>{escape(str(v))}</code></td></tr>" for k, v in (
            ("domain", self.domain_id), ("user profile", self.user_profile), ("space", self.space),
            ("app", self.app_type), ("region", self.region)) if v)
        return f"<b>SageMaker Studio</b><table>{rows}</table>"


def _metadata() -> dict[str, Any] | None:
    if os.environ.get("SKYRL_NB_STUDIO", "").lower() in ("0", "false", "no"):
        return None
    path = Path(os.environ.get("SKYRL_NB_STUDIO_METADATA", METADATA_PATH))
    if path.is_file():
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return {}
    if os.environ.get("SAGEMAKER_SPACE_NAME") or os.environ.get("SKYRL_NB_STUDIO", "").lower() in ("1", "true"):
        return {}
    return None


def info() -> StudioInfo:
    """Detect Studio from its resource-metadata file and environment; never calls AWS."""
    meta = _metadata()
    if meta is None:
        return StudioInfo(in_studio=False)
    arn = str(meta.get("ResourceArn") or "")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or os.environ.get("REGION_NAME")
    if not region and arn.startswith("arn:aws"):
        region = arn.split(":")[3] or None
    domain = meta.get("DomainId")
    if not domain:
        m = re.search(r":app/(d-[a-z0-9]+)/", arn)
        domain = m.group(1) if m else None
    return StudioInfo(
        in_studio=True,
        domain_id=domain,
        user_profile=meta.get("UserProfileName") or None,
        space=meta.get("SpaceName") or os.environ.get("SAGEMAKER_SPACE_NAME") or None,
        app_type=meta.get("AppType") or None,
        region=region,
        resource_arn=arn or None,
        execution_role_arn=meta.get("ExecutionRoleArn") or None,
    )


def in_studio() -> bool:
    """True inside a SageMaker Studio app."""
    return info().in_studio


def proxy_url(port: int) -> str | None:
    """Studio's proxy URL for a port on this host (absolute when domain and region are known, else the
    same-origin path), or ``None`` outside Studio."""
    s = info()
    if not s.in_studio:
        return None
    return (s.base_url or "") + s.proxy_path(port)


def assumed_role_to_role_arn(arn: str) -> str:
    """``arn:aws:sts::123:assumed-role/Name/session`` -> ``arn:aws:iam::123:role/Name`` (others unchanged)."""
    m = re.match(r"^arn:(aws[a-z-]*):sts::(\d{12}):assumed-role/([^/]+)/.+$", arn)
    return f"arn:{m.group(1)}:iam::{m.group(2)}:role/{m.group(3)}" if m else arn


def execution_role(session: Any = None) -> str:
    """The execution role ARN: Studio's metadata, else the sagemaker SDK when installed, else STS
    ``GetCallerIdentity`` (an assumed-role ARN turned back into its role ARN; the role's IAM path is not
    in that ARN, so roles under a path come back without it)."""
    s = info()
    if s.execution_role_arn:
        return s.execution_role_arn
    if session is None:
        try:
            import sagemaker  # the SDK reads Studio's domain/user settings

            getter = getattr(sagemaker, "get_execution_role", None)
            if getter is not None:
                return str(getter())
        except Exception:  # not installed, or outside SageMaker: fall back to STS
            pass
    import boto3

    session = session or boto3.Session(region_name=s.region)
    arn = session.client("sts", region_name=s.region or session.region_name).get_caller_identity()["Arn"]
    return assumed_role_to_role_arn(arn)


#: Where runs go in Studio when the cluster is elsewhere and no run root was given: ``s3://<bucket>/<this>``.
DEFAULT_RUN_PREFIX = "skyrl-runs"


def default_run_root() -> str:
    """``s3://<SageMaker default bucket>/skyrl-runs``: the SageMaker SDK session's default bucket
    (``sagemaker-<region>-<account>``, made if missing; the SDK's config can name another). The SDK is
    imported only here. RuntimeError (one line) when it is not installed."""
    try:
        from sagemaker.core.helper.session_helper import Session  # sagemaker 3 (sagemaker-core)
    except ImportError:
        try:
            from sagemaker import Session  # sagemaker 2
        except ImportError:
            raise RuntimeError("run.run_root: no run root was given and the cluster is not on this machine; the "
                               "default s3://<SageMaker default bucket>/skyrl-runs needs the SageMaker SDK "
                               "(pip install sagemaker-core), or give run.run_root=s3://<bucket>/<prefix>") from None
    return f"s3://{Session().default_bucket()}/{DEFAULT_RUN_PREFIX}"
