"""Registering an export in the SageMaker Model Registry (issue 36, item 4) against moto.

moto 5.2.5 keeps model package groups and packages as given and checks almost nothing in them, so every
CreateModelPackageGroup / CreateModelPackage request is also checked here against botocore's service model (the
patterns, lengths, enums and required members moto skips). moto has no DeleteModelPackageGroup: where a test needs
the rollback to delete a group, a botocore hook does moto's part (docs/registry.md). Failures AWS would answer
(a missing permission, a refused upload) are injected as AWS answers at botocore's ``before-call`` event.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import uuid
from pathlib import Path
from typing import Any

import pytest
from engine_runs import train_in_process
from fake_aws import use_fake_credentials

from skyrl_nb.model_registry import Registration, RegistrationError, default_image, register

REGION = "us-east-1"
ACCOUNT = "123456789012"
ACCESS_KEY = "FAKEREGISTRYTESTKEY1"  # not AKIA-shaped: secret scanners must not flag it
SECRET_KEY = "registry-test-secret-0123456789abcdef"
BUCKET = "skyrl-models-test"
SUMMARY = {"models": {"base": {"n_prompts": 8, "pass@1": 0.25, "pass@1_ci": [0.0, 0.5], "mean_reward": 0.3},
                      "trained": {"n_prompts": 8, "pass@1": 0.625, "pass@1_ci": [0.375, 0.875], "mean_reward": 0.7}},
           "delta/pass@1": {"trained": 0.375}}


@pytest.fixture(autouse=True)
def fake_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake credentials for moto; no real AWS config is read and no endpoint override leaks in."""
    use_fake_credentials(monkeypatch, ACCESS_KEY, SECRET_KEY, REGION)


@pytest.fixture
def export_dir(tmp_path: Path) -> Path:
    """A small Hugging Face folder as job.export writes it (weights, tokenizer, adapter/, skyrl_export.json)."""
    out = tmp_path / "export"
    (out / "adapter").mkdir(parents=True)
    (out / "config.json").write_text(json.dumps({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}))
    (out / "model.safetensors").write_bytes(bytes(range(256)) * 40)
    (out / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE"}}))
    (out / "adapter" / "adapter_config.json").write_text(json.dumps({"r": 8}))
    (out / "skyrl_export.json").write_text(json.dumps({"run_id": "quick-run", "step": 2,
                                                       "base_model": "builtin://tiny-qwen2"}))
    return out


class FakeEvalResult:
    """What skyrl_nb.eval_results.EvalResult offers a registration: ``.metrics``, ``.to_dict()``, ``.eval_id``."""

    eval_id = "quick-eval-20261204-000000-abcd"
    metrics = {"eval/trained/pass_at_1": 0.625, "eval/trained/pass_at_1_ci_lo": 0.375, "eval/base/pass_at_1": 0.25}

    def to_dict(self) -> dict[str, Any]:
        return {"eval_id": self.eval_id, "summary": SUMMARY, "metrics": self.metrics}


def _session() -> Any:
    import boto3

    return boto3.Session(region_name=REGION)


def _requests(session: Any) -> list[tuple[str, dict[str, Any]]]:
    """Every SageMaker request the session's clients build, as (operation, params)."""
    seen: list[tuple[str, dict[str, Any]]] = []
    session.events.register("before-parameter-build.sagemaker",
                            lambda params, model, **_: seen.append((model.name, json.loads(json.dumps(params)))))
    return seen


def _problems(shape: Any, value: Any, path: str) -> list[str]:
    """What the real service model refuses in ``value`` (patterns, lengths, enums, members)."""
    import regex

    kind, meta, out = shape.type_name, shape.metadata, []
    size = len(value) if kind in ("string", "list", "map") else None
    if size is not None and (size < meta.get("min", 0) or size > meta.get("max", size)):
        out.append(f"{path}: length {size} outside {meta.get('min', 0)}..{meta.get('max')}")
    if kind == "structure":
        out += [f"{path}.{m}: missing" for m in shape.required_members if m not in value]
        for key, item in value.items():
            out += (_problems(shape.members[key], item, f"{path}.{key}") if key in shape.members
                    else [f"{path}.{key}: not in the service model"])
    elif kind == "list":
        out += [p for i, item in enumerate(value) for p in _problems(shape.member, item, f"{path}[{i}]")]
    elif kind == "map":
        out += [p for k, v in value.items() for p in _problems(shape.key, k, f"{path} key {k!r}")
                + _problems(shape.value, v, f"{path}[{k!r}]")]
    elif kind == "string":
        if shape.enum and value not in shape.enum:
            out.append(f"{path}: {value!r} not one of {shape.enum}")
        if meta.get("pattern") and not regex.fullmatch(meta["pattern"], value):
            out.append(f"{path}: {value!r} does not match {meta['pattern']}")
    return out


def _check_requests(session: Any, seen: list[tuple[str, dict[str, Any]]]) -> None:
    model = session.client("sagemaker").meta.service_model
    made = [(op, params) for op, params in seen if op.startswith("Create")]
    assert made, "no Create request was seen"
    for op, params in made:
        assert _problems(model.operation_model(op).input_shape, params, op) == []


def _objects(s3: Any, bucket: str, prefix: str = "") -> dict[str, bytes]:
    listing = s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return {o["Key"]: s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read() for o in listing}


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _no_secret(*texts: str) -> None:
    for text in texts:
        assert SECRET_KEY not in text and ACCESS_KEY not in text


def test_register_an_export_with_its_eval_metrics(export_dir: Path, tmp_path: Path) -> None:
    """A local export registered three times in one group: an uncompressed prefix with an eval store's summary as
    metrics (the group is created), a model.tar.gz with an EvalResult's metrics, and one in the SageMaker SDK's
    default bucket. ~5 s here (~3 s of it importing the SageMaker SDK, which the suite imports once anyway)."""
    from moto import mock_aws

    eval_store = tmp_path / "quick-eval-20261204-000000-abcd"
    (eval_store / "eval").mkdir(parents=True)
    (eval_store / "eval" / "summary.json").write_text(json.dumps(SUMMARY))
    with mock_aws():
        session = _session()
        seen = _requests(session)
        s3, sm = session.client("s3"), session.client("sagemaker")
        s3.create_bucket(Bucket=BUCKET)

        reg = register(export_dir, "skyrl-quick", s3=f"s3://{BUCKET}/registry", eval=eval_store, session=session)
        assert isinstance(reg, Registration) and reg.group_created and reg.version == 1
        assert reg.arn == f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:model-package/skyrl-quick/1"
        assert (reg.run_id, reg.step, reg.status) == ("quick-run", 2, "PendingManualApproval")
        assert sm.describe_model_package_group(ModelPackageGroupName="skyrl-quick")["ModelPackageGroupArn"].endswith(
            ":model-package-group/skyrl-quick")
        package = sm.describe_model_package(ModelPackageName=reg.arn)
        assert package["ModelApprovalStatus"] == "PendingManualApproval"
        container = package["InferenceSpecification"]["Containers"][0]
        assert container["Image"] == default_image(REGION) == reg.image
        assert container["Image"].startswith(f"763104351884.dkr.ecr.{REGION}.amazonaws.com/djl-inference:")
        assert container["Environment"] == {"HF_MODEL_ID": "/opt/ml/model"}
        source = container["ModelDataSource"]["S3DataSource"]
        assert source == {"S3Uri": reg.model_data, "S3DataType": "S3Prefix", "CompressionType": "None"}
        assert reg.model_data.startswith(f"s3://{BUCKET}/registry/skyrl-quick/quick-run-step2-")
        assert reg.model_data.endswith("/model/")
        prefix = reg.model_data.removeprefix(f"s3://{BUCKET}/")
        assert {k.removeprefix(prefix): v for k, v in _objects(s3, BUCKET, prefix).items()} == _files(export_dir)

        stats = package["ModelMetrics"]["ModelQuality"]["Statistics"]
        assert stats["S3Uri"] == reg.metrics_uri and stats["ContentType"] == "application/json"
        body = s3.get_object(Bucket=BUCKET, Key=stats["S3Uri"].removeprefix(f"s3://{BUCKET}/"))["Body"].read()
        assert stats["ContentDigest"] == "sha256:" + hashlib.sha256(body).hexdigest()
        doc = json.loads(body)
        assert doc["metrics"]["models/trained/pass@1"] == {"value": 0.625}
        assert doc["metrics"]["models/trained/pass@1_ci/hi"] == {"value": 0.875}
        assert doc["summary"] == SUMMARY and doc["model"]["run_id"] == "quick-run" and doc["model"]["step"] == 2
        meta = package["CustomerMetadataProperties"]
        assert meta["skyrl-nb:run"] == "quick-run" and meta["skyrl-nb:step"] == "2"
        assert meta["skyrl-nb:base-model"] == "builtin://tiny-qwen2" and meta["eval:models/trained/pass@1"] == "0.625"
        assert reg.metrics["delta/pass@1/trained"] == 0.375

        url = f"https://{REGION}.console.aws.amazon.com/sagemaker/home?region={REGION}#/model-registry/skyrl-quick"
        assert reg.console_url == url
        text, page = repr(reg) + str(reg), reg._repr_html_()
        assert reg.arn in text and reg.arn in page and url in str(reg) and f"href='{url}'" in page
        assert "PendingManualApproval" in page and "created by this registration" in page
        _no_secret(text, page, body.decode())

        tarred = register(export_dir, "skyrl-quick", s3=f"s3://{BUCKET}/registry", eval=FakeEvalResult(),
                          compress=True, session=session)
        assert (tarred.version, tarred.group_created) == (2, False)
        container = sm.describe_model_package(ModelPackageName=tarred.arn)["InferenceSpecification"]["Containers"][0]
        assert container["ModelDataUrl"] == tarred.model_data and tarred.model_data.endswith("/model.tar.gz")
        packed = s3.get_object(Bucket=BUCKET, Key=tarred.model_data.removeprefix(f"s3://{BUCKET}/"))["Body"].read()
        with tarfile.open(fileobj=io.BytesIO(packed), mode="r:gz") as tar:
            assert {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()} == _files(export_dir)
        assert tarred.metrics == FakeEvalResult.metrics
        meta = sm.describe_model_package(ModelPackageName=tarred.arn)["CustomerMetadataProperties"]
        assert meta["skyrl-nb:eval"] == FakeEvalResult.eval_id and meta["eval:eval/base/pass_at_1"] == "0.25"

        default = register(export_dir, "skyrl-quick", session=session)  # no s3=: the SageMaker SDK's bucket
        assert default.version == 3 and default.metrics_uri is None and not default.metrics
        assert default.model_data.startswith(f"s3://sagemaker-{REGION}-{ACCOUNT}/skyrl-models/skyrl-quick/")
        assert "ModelMetrics" not in sm.describe_model_package(ModelPackageName=default.arn)
        listed = sm.list_model_packages(ModelPackageGroupName="skyrl-quick")["ModelPackageSummaryList"]
        assert sorted(p["ModelPackageVersion"] for p in listed) == [1, 2, 3]
        _check_requests(session, seen)


def _state(session: Any) -> tuple[dict[str, list[str]], list[str]]:
    s3, sm = session.client("s3"), session.client("sagemaker")
    objects = {b["Name"]: sorted(_objects(s3, b["Name"])) for b in s3.list_buckets()["Buckets"]}
    groups = sorted(g["ModelPackageGroupName"] for g in
                    sm.list_model_package_groups()["ModelPackageGroupSummaryList"])
    return objects, groups


def _one_line_error(call: Any, match: str) -> str:
    with pytest.raises(RegistrationError, match=match) as info:
        call()
    message = str(info.value)
    assert "\n" not in message and len(message) < 600, message
    _no_secret(message)
    return message


def test_bad_inputs_are_one_line_and_change_nothing(export_dir: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Bad group names, a missing bucket, a bucket in another region, bad eval input, a folder that is no model,
    missing or refused credentials, no region: one line each, naming what is wrong, and AWS unchanged. ~3 s."""
    import boto3
    from moto import mock_aws
    from moto.core import set_initial_no_auth_action_count

    (tmp_path / "not-a-model").mkdir()
    with mock_aws():
        session = _session()
        session.client("s3").create_bucket(Bucket=BUCKET)
        session.client("s3", region_name="us-west-2").create_bucket(
            Bucket="skyrl-west", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
        session.client("sagemaker").create_model_package_group(ModelPackageGroupName="existing")
        before = _state(session)
        s3 = f"s3://{BUCKET}/registry"
        cases = [
            (dict(group="bad_name"), r"^group: 'bad_name' is not a model package group name; 1-63 letters"),
            (dict(group="-leading"), r"^group: '-leading' is not"),
            (dict(group="x" * 64), r"^group: 'x{64}' is not"),
            (dict(group=f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:model-package-group/existing"), r"^group: 'arn:"),
            (dict(s3="s3://skyrl-missing-bucket/registry"),
             r"^s3: bucket 'skyrl-missing-bucket' does not exist; create it or give another s3://bucket/prefix$"),
            (dict(s3="skyrl-models-test/registry"), r"^s3: 'skyrl-models-test/registry' does not name an S3 bucket"),
            (dict(s3="s3://skyrl-west/registry"), r"^s3: bucket 'skyrl-west' is in us-west-2, the model package "
                                                  r"would be in us-east-1; .*give region='us-west-2'"),
            (dict(region="mars-1"), r"^region: 'mars-1' is not an AWS region name"),
            (dict(status="Maybe"), r"^status: 'Maybe' is not a SageMaker approval status; one of Pending"),
            (dict(eval={"note": "no numbers"}), r"^eval: it holds no numbers"),
            (dict(eval=42), r"^eval: expected an EvalResult, a dict of metrics or the path .*; got int$"),
            (dict(eval=tmp_path / "no-eval-here"), r"^eval: no summary at .*no-eval-here"),
            (dict(export=tmp_path / "not-a-model"), r"^export: .*not-a-model has no config.json"),
            (dict(export=tmp_path / "nowhere"), r"^export: .*nowhere is not a folder"),
            (dict(export=f"s3://{BUCKET}/exports/none"), r"^export: s3://skyrl-models-test/exports/none has no "
                                                         r"config.json"),
            (dict(compress=True, export=f"s3://{BUCKET}/exports/none"), r"^compress: the export is already on S3"),
            (dict(image="not an image"), r"^image: 'not an image' is not an ECR image URI"),
        ]
        for change, match in cases:
            kwargs = {"export": export_dir, "group": "skyrl-quick", "s3": s3, "session": session} | change
            _one_line_error(lambda kwargs=kwargs: register(**kwargs), match)
            assert _state(session) == before, change

        monkeypatch.delenv("AWS_ACCESS_KEY_ID")
        monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
        _one_line_error(lambda: register(export_dir, "skyrl-quick", s3=s3),
                        r"^AWS credentials: none found; set AWS_PROFILE")
        monkeypatch.delenv("AWS_DEFAULT_REGION")
        _one_line_error(lambda: register(export_dir, "skyrl-quick", s3=s3, session=boto3.Session(
            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)), r"^region: no AWS region is set")
        assert _state(session) == before

    @set_initial_no_auth_action_count(0)  # moto checks every request's keys against its IAM: these are unknown
    def refused() -> None:
        with mock_aws():
            session = boto3.Session(aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
                                    region_name=REGION)
            _one_line_error(lambda: register(export_dir, "skyrl-quick", s3=s3, session=session),
                            r"^AWS credentials: AWS refused them \(InvalidClientTokenId\)")

    refused()


def _answer(status: int, code: str, message: str) -> tuple[Any, dict[str, Any]]:
    """What botocore would have parsed from AWS's error answer, returned from a ``before-call`` hook."""
    from botocore.awsrequest import AWSResponse

    return AWSResponse(None, status, {}, None), {"Error": {"Code": code, "Message": message},
                                                 "ResponseMetadata": {"HTTPStatusCode": status}}


def test_a_failure_after_uploading_removes_what_this_call_made(export_dir: Path) -> None:
    """The role may not create model packages; an upload is refused halfway; the user interrupts; moto itself
    cannot delete a group: each time the objects this call uploaded and the group it created are removed (or
    the one line says what could not be), and a group that was there before stays. ~3 s."""
    from moto import mock_aws
    from moto.sagemaker.models import sagemaker_backends

    with mock_aws():
        session = _session()
        s3, sm = session.client("s3"), session.client("sagemaker")
        s3.create_bucket(Bucket=BUCKET)
        sm.create_model_package_group(ModelPackageGroupName="existing")
        deleted: list[str] = []

        def delete_group(params: dict[str, Any], **_: Any) -> Any:  # moto 5.2.5 lacks DeleteModelPackageGroup
            name = json.loads(params["body"])["ModelPackageGroupName"]  # params: the request as serialized
            deleted.append(name)
            sagemaker_backends[ACCOUNT][REGION].model_package_groups.pop(name)
            from botocore.awsrequest import AWSResponse

            return AWSResponse(None, 200, {}, None), {"ResponseMetadata": {"HTTPStatusCode": 200}}

        def deny(**_: Any) -> Any:
            return _answer(400, "AccessDeniedException", f"User: arn:aws:sts::{ACCOUNT}:assumed-role/Studio/x is not "
                                                         "authorized to perform: sagemaker:CreateModelPackage")

        failing = _session()
        failing.events.register("before-call.sagemaker.CreateModelPackage", deny)
        failing.events.register("before-call.sagemaker.DeleteModelPackageGroup", delete_group)
        s3_url = f"s3://{BUCKET}/registry"
        message = _one_line_error(lambda: register(export_dir, "skyrl-new", s3=s3_url, eval=SUMMARY, session=failing),
                                  r"^register: creating the model package failed: AccessDeniedException: User: .* "
                                  r"sagemaker:CreateModelPackage; removed the 6 objects it uploaded under "
                                  r"s3://skyrl-models-test/registry/skyrl-new/quick-run-step2-[0-9-]+-[0-9a-f]{4}/; "
                                  r"deleted the group 'skyrl-new' it created$")
        assert deleted == ["skyrl-new"] and _state(session) == ({BUCKET: []}, ["existing"]), message

        _one_line_error(lambda: register(export_dir, "existing", s3=s3_url, session=failing),
                        r"^register: creating the model package failed: AccessDeniedException: .*; removed the 5 "
                        r"objects it uploaded under s3://[^;]*/$")
        assert _state(session) == ({BUCKET: []}, ["existing"])
        assert sm.list_model_packages(ModelPackageGroupName="existing")["ModelPackageSummaryList"] == []

        puts: list[str] = []

        def refuse_third_put(params: dict[str, Any], **_: Any) -> Any:
            puts.append(params["url_path"])
            return _answer(403, "AccessDenied", "Access Denied") if len(puts) == 3 else None

        halfway = _session()
        halfway.events.register("before-call.s3.PutObject", refuse_third_put)
        _one_line_error(lambda: register(export_dir, "skyrl-new", s3=s3_url, session=halfway),
                        r"^register: uploading model.safetensors \(10.0 KB\) failed: AccessDenied: Access Denied; "
                        r"removed the 2 objects it uploaded under s3://")
        assert len(puts) == 3 and _state(session) == ({BUCKET: []}, ["existing"])

        def interrupt(**_: Any) -> Any:
            raise KeyboardInterrupt

        interrupted = _session()
        interrupted.events.register("before-call.sagemaker.CreateModelPackage", interrupt)
        interrupted.events.register("before-call.sagemaker.DeleteModelPackageGroup", delete_group)
        with pytest.raises(KeyboardInterrupt):
            register(export_dir, "skyrl-new", s3=s3_url, session=interrupted)
        assert _state(session) == ({BUCKET: []}, ["existing"]) and deleted == ["skyrl-new", "skyrl-new"]

        moto_only = _session()  # moto's own answer to DeleteModelPackageGroup: not implemented
        moto_only.events.register("before-call.sagemaker.CreateModelPackage", deny)
        _one_line_error(lambda: register(export_dir, "skyrl-stuck", s3=s3_url, session=moto_only),
                        r"; removed the 5 objects it uploaded under s3://[^;]*/; could not delete the group "
                        r"'skyrl-stuck' it created \(NotImplementedError: The delete_model_package_group action has "
                        r"not been implemented\)$")
        assert _state(session) == ({BUCKET: []}, ["existing", "skyrl-stuck"])


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: str) -> Path:
    """A finished one-step run of the tiny model with a checkpoint (~4 s)."""
    return train_in_process(tmp_path_factory.mktemp("runs"), "reg", tiny_model_dir, 1)


@pytest.mark.slow
def test_job_export_and_the_magic_register_a_run(run_dir: Path, tmp_path: Path, s3: Any,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end on the session's moto server (S3, STS and SageMaker; the engine's export process uploads there
    too): job.export(..., register=) exports and registers a run's checkpoint; %skyrl export RUN s3://... --register
    registers an export where the engine wrote it; a bad group name is refused before anything is exported. ~13 s
    here (two export processes that import torch), plus ~14 s for the one-step run and the moto server when no
    other test of the session made them."""
    import boto3
    from IPython.core.error import UsageError
    from IPython.core.interactiveshell import InteractiveShell

    from skyrl_nb.jobs import Job

    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    for key in ("AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, s3.env[key])
    group = f"e2e-{uuid.uuid4().hex[:8]}"
    s3c, sm = boto3.client("s3", region_name=REGION), boto3.client("sagemaker", region_name=REGION)
    job = Job(None, submission_id="reg", run_id="reg", run_dir=str(run_dir))

    with pytest.raises(RegistrationError, match=r"^group: 'bad name' is not a model package group name"):
        job.export(tmp_path / "never", register="bad name")
    assert not (tmp_path / "never").exists()
    with pytest.raises(TypeError, match="s3 only go with register="):
        job.export(tmp_path / "never", s3=f"s3://{s3.bucket}/registry")

    reg = job.export(tmp_path / "job-export", register=group, s3=f"s3://{s3.bucket}/registry/{group}", eval=SUMMARY)
    assert reg.export is not None and reg.export.step == 1 and (reg.run_id, reg.step, reg.version) == ("reg", 1, 1)
    prefix = reg.model_data.removeprefix(f"s3://{s3.bucket}/")
    uploaded = {k.removeprefix(prefix): v for k, v in _objects(s3c, s3.bucket, prefix).items()}
    assert uploaded == _files(tmp_path / "job-export") and "model.safetensors" in uploaded
    assert sm.describe_model_package(ModelPackageName=reg.arn)["ModelApprovalStatus"] == "PendingManualApproval"

    monkeypatch.setenv("SKYRL_NB_CACHE_DIR", str(tmp_path / "nb-cache"))  # no local Ray head to ask
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "skyrl_nb")
    shell.run_line_magic("config", f"SkyrlMagics.run_root = {str(run_dir.parent)!r}")
    where = f"s3://{s3.bucket}/exports/{group}"
    before = set(_objects(s3c, s3.bucket, f"registry/{group}/"))
    in_place = shell.run_line_magic("skyrl", f"export reg {where} --register {group}")
    assert isinstance(in_place, Registration) and in_place.version == 2 and in_place.model_data == where + "/"
    assert set(_objects(s3c, s3.bucket, f"registry/{group}/")) == before  # registered where the engine wrote it
    package = sm.describe_model_package(ModelPackageName=in_place.arn)
    assert package["InferenceSpecification"]["Containers"][0]["ModelDataSource"]["S3DataSource"]["S3Uri"] == \
        where + "/"
    assert package["CustomerMetadataProperties"]["skyrl-nb:run"] == "reg"
    assert package["CustomerMetadataProperties"]["skyrl-nb:step"] == "1"
    for line, expected in ((f"export reg {tmp_path / 'm'} --register bad_name", "%skyrl export: group: 'bad_name'"),
                           ("status reg --register x", "--register takes a model package group name and only")):
        with pytest.raises(UsageError) as info:
            shell.run_line_magic("skyrl", line)
        assert expected in str(info.value) and "\n" not in str(info.value), line
    assert not (tmp_path / "m").exists()
