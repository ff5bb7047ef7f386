"""Register an export in the SageMaker Model Registry: its files on S3, a model package for them in a model
package group (created if missing), an evaluation's numbers as the package's model-quality metrics, and the
approval status ``PendingManualApproval`` so a person decides before anyone deploys it.

>>> reg = skyrl_nb.register("~/models/my-run", "my-models", s3="s3://my-bucket/registry", eval=result)  # doctest: +SKIP
>>> reg.arn, reg.console_url                                                                          # doctest: +SKIP
>>> job.export("~/models/my-run", register="my-models", s3="s3://my-bucket/registry")                 # doctest: +SKIP

One idea, one registration and what it leaves behind. Everything that can be checked is checked before anything
is made (the group name against SageMaker's pattern, the export, the eval numbers, the S3 location, the region,
the credentials, the bucket and its region): a bad input is one line and nothing on AWS changes. When a later step
fails (an upload, the group, the package), what this call made is removed again (the objects it uploaded, a group
it created) and the one-line error says what failed and what was undone. boto3 makes the calls (the ``aws``
extra); the SageMaker SDK, when installed, names the default bucket. docs/registry.md: what moto cannot check.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import os
import re
import secrets
import tarfile
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyrl_core.exports import ExportResult, size_text

#: SageMaker's ``EntityName`` (botocore's service model: CreateModelPackageGroup.ModelPackageGroupName).
GROUP_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")
APPROVAL_STATUSES = ("PendingManualApproval", "Approved", "Rejected")
_REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-\d{1,2}")
#: Where registrations go in the SageMaker SDK's default bucket when ``s3=`` is not given.
DEFAULT_PREFIX = "skyrl-models"
#: The Large Model Inference container (DJL Serving; vLLM inside), as the SageMaker SDK's ``djl-lmi`` 0.38.0 names
#: it. It serves a Hugging Face folder put at /opt/ml/model (HF_MODEL_ID below). Override with ``image=``.
DEFAULT_IMAGE = "djl-inference:0.38.0-lmi29.0.0-cu130"
DEFAULT_ENVIRONMENT = {"HF_MODEL_ID": "/opt/ml/model"}
#: The deep learning containers' ECR account where it is not 763104351884 (the SDK's image_uri_config).
_IMAGE_ACCOUNTS = {
    "af-south-1": "626614931356", "ap-east-1": "871362719292", "ap-east-2": "975050140332", "ap-northeast-3":
    "364406365360", "ap-south-2": "772153158452", "ap-southeast-3": "907027046896", "ap-southeast-4": "457447274322",
    "ap-southeast-5": "550225433462", "ap-southeast-6": "633930458069", "ap-southeast-7": "590183813437", "ca-west-1":
    "204538143572", "cn-north-1": "727897471807", "cn-northwest-1": "727897471807", "eu-central-2": "380420809688",
    "eu-south-1": "692866216735", "eu-south-2": "503227376785", "il-central-1": "780543022126", "me-central-1":
    "914824155844", "me-south-1": "217643126080", "mx-central-1": "637423239942", "us-gov-east-1": "446045086412",
    "us-gov-west-1": "442386744353"}
EXPORT_METADATA = "skyrl_export.json"  # what `job.export` writes beside the model: run, step, base model
STATISTICS_FILE = "evaluation.json"
#: Error codes that mean the credentials themselves were refused (not a missing permission).
_CREDENTIAL_CODES = frozenset({"InvalidClientTokenId", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
                               "ExpiredTokenException", "UnrecognizedClientException", "AuthFailure", "InvalidToken"})
#: CustomerMetadataProperties: at most 50 entries, keys <= 128 and values <= 256 of these characters.
_METADATA_LIMIT = 50
_METADATA_BAD = re.compile(r"[^\w .:/=+\-@]")


class RegistrationError(ValueError):
    """A registration that cannot be done, or that failed and was undone: one line naming what and why."""


@dataclass(frozen=True)
class Registration:
    """A model package in the SageMaker Model Registry, as `register` made it."""

    arn: str
    group: str
    version: int | None
    status: str
    """The approval status it was made with (``PendingManualApproval`` unless asked otherwise)."""
    model_data: str
    """The S3 location of the model: a prefix ending in ``/`` (uncompressed) or a ``model.tar.gz``."""
    region: str
    image: str
    metrics_uri: str | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)
    run_id: str | None = None
    step: int | None = None
    group_created: bool = False
    export: ExportResult | None = field(default=None, repr=False, compare=False)
    """The export registered, when `job.export(..., register=)` made it in the same call."""

    @property
    def console_url(self) -> str:
        """The group in the SageMaker AI console's model registry."""
        return console_url(self.region, self.group)

    def _what(self) -> str:
        step = f" step {self.step}" if self.step is not None else ""
        return f"run {self.run_id!r}{step}" if self.run_id else "an export"

    def __str__(self) -> str:
        made = " (group created)" if self.group_created else ""
        return (f"registered {self._what()} as version {self.version} of {self.group!r}{made}: {self.status}, "
                f"{len(self.metrics)} metrics; {self.console_url}")

    def __repr__(self) -> str:
        return (f"Registration(arn={self.arn!r}, group={self.group!r}, version={self.version}, status={self.status!r}, "
                f"model_data={self.model_data!r}, metrics={len(self.metrics)}, region={self.region!r})")

    def _repr_html_(self) -> str:
        e = html.escape
        rows = [("package", f"<code>{e(self.arn)}</code>"),
                ("group", e(self.group) + (" (created by this registration)" if self.group_created else "")),
                ("version", e(str(self.version))), ("approval", e(self.status)), ("from", e(self._what())),
                ("model data", f"<code>{e(self.model_data)}</code>"), ("image", f"<code>{e(self.image)}</code>")]
        if self.metrics_uri:
            shown = ", ".join(f"{e(k)} = {v:.4g}" for k, v in list(self.metrics.items())[:6])
            more = f" and {len(self.metrics) - 6} more" if len(self.metrics) > 6 else ""
            rows.append(("metrics", f"{shown}{more} (<code>{e(self.metrics_uri)}</code>)"))
        rows.append(("console", f"<a href='{e(self.console_url)}' target='_blank' rel='noopener'>open the group</a>"))
        body = "".join(f"<tr><td style='text-align:left;padding-right:1em'><b>{k}</b></td>"
                       f"<td style='text-align:left'>{v}</td></tr>" for k, v in rows)
        return f"<div><b>Registered model package</b><table>{body}</table></div>"


def console_url(region: str, group: str) -> str:
    """The model package group ``group`` in the SageMaker AI console of ``region`` (the aws, aws-cn and
    aws-us-gov partitions)."""
    if region.startswith("cn-"):
        host = "console.amazonaws.cn"
    elif region.startswith("us-gov-"):
        host = "console.amazonaws-us-gov.com"
    else:
        host = f"{region}.console.aws.amazon.com"
    return f"https://{host}/sagemaker/home?region={region}#/model-registry/{group}"


def default_image(region: str) -> str:
    """The serving container `register` names when no ``image=`` is given: `DEFAULT_IMAGE` in ``region``."""
    account = _IMAGE_ACCOUNTS.get(region, "763104351884")
    domain = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"{account}.dkr.ecr.{region}.{domain}/{DEFAULT_IMAGE}"


def register(export: ExportResult | str | os.PathLike[str], group: str, *, s3: str | None = None, eval: Any = None,
             region: str | None = None, session: Any = None, image: str | None = None,
             environment: Mapping[str, str] | None = None, compress: bool = False,
             status: str = "PendingManualApproval", description: str | None = None) -> Registration:
    """Register an export (an `ExportResult`, an export folder, or the ``s3://bucket/prefix`` an export was
    written to) as a new version in the model package group ``group`` (created if missing).

    - ``s3``: where this call writes (``s3://bucket/prefix``); default: the SageMaker SDK session's default bucket
      (``sagemaker-<region>-<account>``, under ``skyrl-models/``) when the SDK is installed. A local export is
      uploaded under ``<prefix>/<group>/<run>-step<N>-<time>/model/`` (``model.tar.gz`` with ``compress=True``);
      an export already on S3 is registered where it is.
    - ``eval``: an `EvalResult`, a dict of metrics, or an eval store / its ``eval/summary.json``: the numbers go to
      S3 as the package's ModelQuality statistics (``evaluation.json``) and, the first ones, into its
      CustomerMetadataProperties beside the run and step (versioned packages take no tags).
    - ``image`` / ``environment``: the serving container (default: `default_image`, ``HF_MODEL_ID=/opt/ml/model``).
    - ``region`` / ``session``: default: the boto3 session's (``AWS_DEFAULT_REGION``, the profile).

    >>> reg = register("~/models/my-run", "my-models", s3="s3://my-bucket/registry")   # doctest: +SKIP
    Registration(arn='arn:aws:sagemaker:us-east-1:...:model-package/my-models/1', group='my-models', ...)
    """
    group = check_group(group)
    if status not in APPROVAL_STATUSES:
        raise RegistrationError(f"status: {status!r} is not a SageMaker approval status; one of "
                                f"{', '.join(APPROVAL_STATUSES)}")
    source = _source(export)
    metrics, summary, eval_id = eval_metrics(eval)
    if compress and source.on_s3:
        raise RegistrationError(f"compress: the export is already on S3 ({source.location}); compress=True needs a "
                                "local export folder to pack as model.tar.gz")
    if image is not None and (not image or len(image) > 255 or re.search(r"\s", image)):
        raise RegistrationError(f"image: {image!r} is not an ECR image URI (no spaces, at most 255 characters)")
    aws = _Aws.connect(session, region)
    image = image or default_image(aws.region)
    if source.on_s3:
        bucket, prefix = _parse_s3(source.location, "export")
        aws.check_bucket(bucket, "export")
        source = aws.read_s3_export(source, bucket, prefix)
    needs_upload = not source.on_s3 or summary is not None
    dest_bucket, dest_prefix = _parse_s3(s3, "s3") if s3 is not None else (None, "")
    if needs_upload:
        if dest_bucket is None:
            dest_bucket, dest_prefix = aws.default_bucket()
        aws.check_bucket(dest_bucket, "s3")
    exists = aws.group_exists(group)

    run_id, step = source.meta.get("run_id"), source.meta.get("step")
    label = _metadata_text(f"{run_id}-step{step}" if run_id else Path(source.location.rstrip("/")).name)
    key = "/".join(p for p in (dest_prefix, group, f"{label.replace(' ', '_')}-{time.strftime('%Y%m%d-%H%M%S')}-"
                                                     f"{secrets.token_hex(2)}") if p)
    made = _Made(aws, dest_bucket or "", key)
    try:
        if source.on_s3:
            model_data, compressed = source.location.rstrip("/") + "/", False
        else:
            model_data, compressed = made.upload_model(source, compress), compress
        metrics_uri = digest = None
        if summary is not None:
            doc = statistics(metrics, summary, eval_id, source)
            metrics_uri, digest = made.put_json(STATISTICS_FILE, doc)
        if not exists:
            made.doing = f"creating the model package group {group!r}"
            aws.sm.create_model_package_group(
                ModelPackageGroupName=group, ModelPackageGroupDescription="Models trained with skyrl-nb",
                Tags=[{"Key": "created-by", "Value": "skyrl-nb"}])
            made.group = group
        made.doing = "creating the model package"
        request = package_request(
            group, model_data=model_data, compressed=compressed, image=image,
            environment=dict(DEFAULT_ENVIRONMENT if environment is None else environment), status=status,
            metadata=customer_metadata(source, eval_id, metrics), metrics_uri=metrics_uri, digest=digest,
            description=_description(source, description))
        arn = aws.sm.create_model_package(**request)["ModelPackageArn"]
    except BaseException as err:  # an interrupt too: what was made is removed before anything else happens
        reason = aws.reason(err) if isinstance(err, Exception) else type(err).__name__
        undone = made.undo()
        if not isinstance(err, Exception):
            raise
        raise RegistrationError(f"register: {made.doing} failed: {reason}; {undone}") from None
    version = arn.rsplit("/", 1)[-1]
    return Registration(arn=arn, group=group, version=int(version) if version.isdigit() else None, status=status,
                        model_data=model_data, region=aws.region, image=image, metrics_uri=metrics_uri,
                        metrics=dict(metrics), run_id=run_id, step=step, group_created=made.group is not None,
                        export=source.export)


# -- what is registered -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Source:
    location: str
    """A local folder (absolute) or ``s3://bucket/prefix``."""
    meta: dict[str, Any]
    """The export's skyrl_export.json (run_id, step, base_model, ...); empty for a plain model folder."""
    export: ExportResult | None = None

    @property
    def on_s3(self) -> bool:
        return self.location.startswith("s3://")


def _source(export: Any) -> _Source:
    result = export if isinstance(export, ExportResult) else None
    if result is not None:
        location = result.path
    elif isinstance(export, (str, os.PathLike)):
        location = os.fspath(export)
    else:
        raise RegistrationError(f"export: expected an ExportResult, an export folder or s3://bucket/prefix; got "
                                f"{type(export).__name__}")
    if location.startswith("s3://"):
        meta = {"run_id": result.run_id, "step": result.step, "base_model": result.base_model} if result else {}
        return _Source(location.rstrip("/"), meta, result)
    folder = Path(location).expanduser().resolve()
    if not folder.is_dir():
        raise RegistrationError(f"export: {location} is not a folder; give the folder job.export wrote")
    if not (folder / "config.json").is_file():
        raise RegistrationError(f"export: {folder} has no config.json; give a Hugging Face model folder (as "
                                "job.export writes)")
    try:
        meta = json.loads((folder / EXPORT_METADATA).read_text(encoding="utf-8"))
    except FileNotFoundError:
        meta = {}  # a plain Hugging Face folder: registered without run and step
    except (OSError, ValueError) as err:
        raise RegistrationError(f"export: {folder / EXPORT_METADATA} cannot be read: {err}") from None
    return _Source(str(folder), meta if isinstance(meta, dict) else {}, result)


def check_group(group: Any) -> str:
    """``group`` when it is a valid model package group name; else RegistrationError."""
    if not isinstance(group, str) or not GROUP_NAME.fullmatch(group):
        raise RegistrationError(f"group: {group!r} is not a model package group name; 1-63 letters, digits and "
                                "hyphens, starting and ending with a letter or digit (SageMaker's pattern)")
    return group


def _parse_s3(url: Any, what: str) -> tuple[str, str]:
    from skyrl_core.store import S3_BUCKET_RULE, s3_bucket_prefix

    found = s3_bucket_prefix(url)
    if found is None:
        raise RegistrationError(f"{what}: {url!r} does not name an S3 bucket; give s3://bucket/prefix ({S3_BUCKET_RULE})")
    return found


# -- the eval's numbers -------------------------------------------------------------------------------------

def eval_metrics(eval: Any) -> tuple[dict[str, float], dict[str, Any] | None, str | None]:
    """``(flat numeric metrics, the whole summary, eval id)`` of what ``eval=`` holds: an `EvalResult` (its
    ``.metrics`` and ``.to_dict()``), a dict (flat, or nested as eval/summary.json: keys joined with ``/``), or a
    path / URL of an eval store or its ``eval/summary.json``. ``({}, None, None)`` for None."""
    if eval is None:
        return {}, None, None
    given, eval_id = getattr(eval, "metrics", None), getattr(eval, "eval_id", None)
    if isinstance(eval, (str, os.PathLike, Mapping)):
        summary = _read_summary(os.fspath(eval)) if isinstance(eval, (str, os.PathLike)) else dict(eval)
        flat, eval_id = flatten(summary), None
    elif isinstance(given, Mapping) or callable(getattr(eval, "to_dict", None)):
        summary = eval.to_dict() if callable(getattr(eval, "to_dict", None)) else dict(given)  # type: ignore[arg-type]
        flat = flatten(given if isinstance(given, Mapping) else summary)
    else:
        raise RegistrationError(f"eval: expected an EvalResult, a dict of metrics or the path of an eval store's "
                                f"eval/summary.json; got {type(eval).__name__}")
    eval_id = eval_id or (summary.get("eval_id") if isinstance(summary, dict) else None)
    if not flat:
        raise RegistrationError("eval: it holds no numbers (give EvalResult.metrics, a dict such as "
                                "{'pass@1': 0.42}, or an eval/summary.json)")
    try:
        json.dumps(summary, default=str)
    except (TypeError, ValueError) as err:
        raise RegistrationError(f"eval: it cannot be written as JSON: {err}") from None
    return flat, summary, str(eval_id) if eval_id else None


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The finite numbers of a nested dict, keys joined with ``/`` (a ``[lo, hi]`` interval as ``key/lo``,
    ``key/hi``); booleans and text left out."""
    out: dict[str, float] = {}
    for k, v in data.items():
        key = f"{prefix}/{k}" if prefix else str(k)
        if isinstance(v, bool):
            continue
        if isinstance(v, (int, float)) and math.isfinite(v):
            out[key] = float(v)
        elif isinstance(v, Mapping):
            out.update(flatten(v, key))
        elif isinstance(v, (list, tuple)) and len(v) == 2 and all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in v):
            out[f"{key}/lo"], out[f"{key}/hi"] = float(v[0]), float(v[1])
    return out


def _read_summary(location: str) -> dict[str, Any]:
    from skyrl_core.store import is_url, open_store

    names = [location] if location.endswith(".json") else [f"{location.rstrip('/')}/eval/summary.json",
                                                            f"{location.rstrip('/')}/summary.json"]
    for name in names:
        try:
            folder, _, base = name.rpartition("/")
            data = open_store(folder).read(base) if is_url(name) else Path(name).expanduser().read_bytes()
            summary = json.loads(data)
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as err:
            raise RegistrationError(f"eval: {name} cannot be read as JSON: {err}") from None
        if not isinstance(summary, dict):
            raise RegistrationError(f"eval: {name} holds a {type(summary).__name__}, not an eval summary")
        return summary
    raise RegistrationError(f"eval: no summary at {location} (an eval store's eval/summary.json is written when "
                            "its job ends)")


def statistics(metrics: Mapping[str, float], summary: Any, eval_id: str | None, source: _Source) -> dict[str, Any]:
    """The ModelQuality statistics document: each metric as ``{"value": v}`` (Model Monitor's shape for a
    metric), the model it describes, and the whole summary it came from."""
    return {"version": 0.0, "generated_by": "skyrl-nb", "eval_id": eval_id,
            "model": {"run_id": source.meta.get("run_id"), "step": source.meta.get("step"),
                      "base_model": source.meta.get("base_model"), "export": source.location},
            "metrics": {k: {"value": v} for k, v in metrics.items()}, "summary": summary}


# -- the request ---------------------------------------------------------------------------------------------

def _metadata_text(value: Any, limit: int = 256) -> str:
    return _METADATA_BAD.sub("_", str(value))[:limit]


def customer_metadata(source: _Source, eval_id: str | None, metrics: Mapping[str, float]) -> dict[str, str]:
    """The package's CustomerMetadataProperties: where it came from (``skyrl-nb:run``, ``:step``, ``:base-model``,
    ``:export``, ``:eval``), then as many metrics (``eval:<name>``) as fit in SageMaker's 50 entries."""
    out = {"skyrl-nb:export": source.location}
    for key, value in (("run", source.meta.get("run_id")), ("step", source.meta.get("step")),
                       ("base-model", source.meta.get("base_model")), ("eval", eval_id)):
        if value is not None and value != "":
            out[f"skyrl-nb:{key}"] = value
    for name, value in metrics.items():
        if len(out) >= _METADATA_LIMIT:
            break
        out[f"eval:{name}"] = f"{value:.6g}"
    return {_metadata_text(k, 128): _metadata_text(v) for k, v in out.items() if _metadata_text(v)}


def _description(source: _Source, given: str | None) -> str:
    meta = source.meta
    what = f"run {meta.get('run_id')} step {meta.get('step')}" if meta.get("run_id") else source.location
    base = f" (base model {meta['base_model']})" if meta.get("base_model") else ""
    return re.sub(r"[\x00-\x1f\x7f]", " ", given or f"skyrl-nb export of {what}{base}")[:1024]


def package_request(group: str, *, model_data: str, compressed: bool, image: str, environment: dict[str, str],
                    status: str, metadata: dict[str, str], metrics_uri: str | None, digest: str | None,
                    description: str) -> dict[str, Any]:
    """The CreateModelPackage request: a versioned package in ``group`` whose one container serves
    ``model_data`` (an uncompressed prefix through ModelDataSource, or a model.tar.gz through ModelDataUrl)."""
    data = {"ModelDataUrl": model_data} if compressed else {"ModelDataSource": {"S3DataSource": {
        "S3Uri": model_data, "S3DataType": "S3Prefix", "CompressionType": "None"}}}
    container: dict[str, Any] = {"Image": image, "Environment": environment, **data}
    request: dict[str, Any] = {
        "ModelPackageGroupName": group, "ModelPackageDescription": description, "ModelApprovalStatus": status,
        "InferenceSpecification": {"Containers": [container], "SupportedContentTypes": ["application/json"],
                                   "SupportedResponseMIMETypes": ["application/json"]},
        "MetadataProperties": {"GeneratedBy": "skyrl-nb"}, "CustomerMetadataProperties": metadata,
        "Domain": "NATURAL_LANGUAGE_PROCESSING", "Task": "TEXT_GENERATION",
        "ClientToken": secrets.token_hex(16),  # the same token on botocore's retries: one package, not two
    }
    if metrics_uri:
        request["ModelMetrics"] = {"ModelQuality": {"Statistics": {
            "ContentType": "application/json", "S3Uri": metrics_uri, "ContentDigest": f"sha256:{digest}"}}}
    return request


# -- AWS -------------------------------------------------------------------------------------------------------

class _Aws:
    """The clients of one registration, and how its errors read (credentials never in them)."""

    def __init__(self, session: Any, region: str, secrets_: list[str]):
        self.session, self.region, self._secrets = session, region, secrets_
        self.s3 = session.client("s3", region_name=region)
        self.sm = session.client("sagemaker", region_name=region)

    @classmethod
    def connect(cls, session: Any, region: str | None) -> _Aws:
        if region is not None and (not isinstance(region, str) or not _REGION.fullmatch(region)):
            raise RegistrationError(f"region: {region!r} is not an AWS region name (such as 'us-east-1')")
        try:
            import boto3
        except ImportError:
            raise RegistrationError("register needs boto3: pip install 'skyrl-nb[aws]'") from None
        session = session if session is not None else boto3.Session()
        region = region or session.region_name
        if not region:
            raise RegistrationError("region: no AWS region is set; give region='us-east-1' (or set "
                                    "AWS_DEFAULT_REGION, or a region in the profile)")
        if (creds := session.get_credentials()) is None:
            raise RegistrationError("AWS credentials: none found; set AWS_PROFILE (or AWS_ACCESS_KEY_ID and "
                                    "AWS_SECRET_ACCESS_KEY), or run where a role is attached")
        frozen = creds.get_frozen_credentials()
        aws = cls(session, region, [s for s in (frozen.access_key, frozen.secret_key, frozen.token) if s])
        try:
            session.client("sts", region_name=region).get_caller_identity()
        except Exception as err:
            raise RegistrationError(f"AWS credentials: {aws.reason(err)}") from None
        return aws

    def reason(self, err: BaseException) -> str:
        """One line for a boto3 error: its code and message, credentials scrubbed."""
        from botocore.exceptions import ClientError, NoCredentialsError

        if isinstance(err, NoCredentialsError):
            return "no AWS credentials found"
        if type(err).__name__ == "S3UploadFailedError" and isinstance(err.__context__, ClientError):
            err = err.__context__  # AWS's answer, not boto3's long text around it (local path and key)
        if isinstance(err, ClientError):
            error = err.response.get("Error", {})
            code = str(error.get("Code") or err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "?"))
            if code in _CREDENTIAL_CODES:
                return f"AWS refused them ({code}); check AWS_PROFILE / AWS_ACCESS_KEY_ID, or renew the session"
            text = f"{code}: {error.get('Message')}" if error.get("Message") else code
        else:
            text = f"{type(err).__name__}: {err}"
        for secret in self._secrets:
            text = text.replace(secret, "***")
        text = " ".join(text.split())
        return text if len(text) <= 300 else text[:297] + "..."

    def check_bucket(self, bucket: str, what: str) -> None:
        """The bucket exists, these credentials reach it, and it is in the registry's region."""
        try:
            answer = self.s3.head_bucket(Bucket=bucket)
        except Exception as err:
            response = getattr(err, "response", None) or {}
            code = str(response.get("Error", {}).get("Code"))
            http = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            why = ("does not exist; create it or give another s3://bucket/prefix" if code in ("404", "NoSuchBucket")
                   or http == 404 else "is not reachable with these credentials (403)"
                   if code in ("403", "AccessDenied") or http == 403 else self.reason(err))
            raise RegistrationError(f"{what}: bucket {bucket!r} {why}") from None
        where = answer.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("x-amz-bucket-region")
        if where and where != self.region:
            raise RegistrationError(f"{what}: bucket {bucket!r} is in {where}, the model package would be in "
                                    f"{self.region}; SageMaker needs the model data in the package's region "
                                    f"(give region={where!r} or a bucket in {self.region})")

    def read_s3_export(self, source: _Source, bucket: str, prefix: str) -> _Source:
        """An export on S3: it must hold a config.json; its skyrl_export.json says run and step."""
        from botocore.exceptions import ClientError

        try:
            self.s3.head_object(Bucket=bucket, Key=f"{prefix}/config.json")
        except ClientError as err:
            if err.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404:
                raise RegistrationError(f"export: {source.location} has no config.json; give the s3:// prefix "
                                        "job.export wrote") from None
            raise RegistrationError(f"export: {source.location}: {self.reason(err)}") from None
        if source.meta:
            return source
        try:
            body = self.s3.get_object(Bucket=bucket, Key=f"{prefix}/{EXPORT_METADATA}")["Body"].read()
            meta = json.loads(body)
        except (ClientError, ValueError):
            return source  # a plain model folder: registered without run and step
        return _Source(source.location, meta if isinstance(meta, dict) else {}, source.export)

    def default_bucket(self) -> tuple[str, str]:
        """The SageMaker SDK session's default bucket (it creates ``sagemaker-<region>-<account>`` if missing)."""
        try:
            from sagemaker.core.helper.session_helper import Session  # sagemaker 3 (sagemaker-core)
        except ImportError:
            try:
                from sagemaker import Session  # sagemaker 2
            except ImportError:
                raise RegistrationError("s3: give s3='s3://bucket/prefix' for the model's files (the default, the "
                                        "SageMaker SDK's bucket, needs pip install sagemaker-core)") from None
        try:
            bucket = Session(boto_session=self.session).default_bucket()
        except Exception as err:
            raise RegistrationError(f"s3: the SageMaker SDK found no default bucket ({self.reason(err)}); give "
                                    "s3='s3://bucket/prefix'") from None
        return str(bucket), DEFAULT_PREFIX

    def group_exists(self, group: str) -> bool:
        try:
            self.sm.describe_model_package_group(ModelPackageGroupName=group)
            return True
        except Exception as err:
            error = (getattr(err, "response", None) or {}).get("Error", {})
            if error.get("Code") in ("ValidationException", "ResourceNotFound") and \
                    "does not exist" in str(error.get("Message")):
                return False
            raise RegistrationError(f"group: {group!r} cannot be looked up: {self.reason(err)}") from None


@dataclass
class _Made:
    """What one registration made on AWS so far, so a failure can remove it again."""

    aws: _Aws
    bucket: str
    key: str
    keys: list[str] = field(default_factory=list)
    group: str | None = None
    doing: str = "uploading the model"

    def upload_model(self, source: _Source, compress: bool) -> str:
        files = sorted(os.path.relpath(os.path.join(d, n), source.location).replace(os.sep, "/")
                       for d, _, names in os.walk(source.location) for n in names)
        if not compress:
            for rel in files:
                self._upload(os.path.join(source.location, rel), f"{self.key}/model/{rel}")
            return f"s3://{self.bucket}/{self.key}/model/"
        with tempfile.TemporaryDirectory(prefix="skyrl-register-") as tmp:
            packed = os.path.join(tmp, "model.tar.gz")
            with tarfile.open(packed, "w:gz") as tar:
                for rel in files:
                    tar.add(os.path.join(source.location, rel), arcname=rel)
            self._upload(packed, f"{self.key}/model.tar.gz")
        return f"s3://{self.bucket}/{self.key}/model.tar.gz"

    def _upload(self, path: str, key: str) -> None:
        self.doing = f"uploading {key.rsplit('/', 1)[-1]} ({size_text(os.path.getsize(path))})"
        self.aws.s3.upload_file(path, self.bucket, key)
        self.keys.append(key)

    def put_json(self, name: str, doc: Any) -> tuple[str, str]:
        self.doing = f"uploading {name}"
        body = json.dumps(doc, indent=2, default=str).encode()
        key = f"{self.key}/{name}"
        self.aws.s3.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType="application/json")
        self.keys.append(key)
        return f"s3://{self.bucket}/{key}", hashlib.sha256(body).hexdigest()

    def undo(self) -> str:
        """Remove what was made; say what was removed and what could not be."""
        said = []
        if self.keys:
            where, failed = f"s3://{self.bucket}/{self.key}/", len(self.keys)
            try:
                failed = sum(len(self.aws.s3.delete_objects(Bucket=self.bucket, Delete={
                    "Objects": [{"Key": k} for k in self.keys[i:i + 1000]], "Quiet": True}).get("Errors") or [])
                    for i in range(0, len(self.keys), 1000))
                why = ""
            except Exception as err:
                why = f" ({self.aws.reason(err)})"
            said.append(f"could not remove {failed} of the {len(self.keys)} objects it uploaded under {where}{why}"
                        if failed else f"removed the {len(self.keys)} objects it uploaded under {where}")
        if self.group:
            try:
                self.aws.sm.delete_model_package_group(ModelPackageGroupName=self.group)
                said.append(f"deleted the group {self.group!r} it created")
            except Exception as err:
                said.append(f"could not delete the group {self.group!r} it created ({self.aws.reason(err)})")
        return "; ".join(said) if said else "nothing had been made"

