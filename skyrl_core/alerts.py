"""A run's alerts (``trainer.alerts``): where they go, what they say, and whether one was already sent.

Where (``trainer.alerts.webhook``):

- ``env:NAME``: the environment variable ``NAME``, where the alert is sent from, holds a webhook URL (a Slack
  incoming webhook, or any endpoint that takes Slack's ``{"text": ...}`` JSON) or an SNS topic ARN.
- ``arn:aws:sns:<region>:<account>:<topic>``: an SNS topic, published to with boto3 and the sender's AWS credentials.

A webhook URL carries its own token, and the config is saved with the run (config.yaml, MLflow params, the
job's submission), so a URL is never a config value: it is refused in one line that shows only its scheme and
host (:func:`masked`); every log line, event and repr shows the variable's name and that masked form.

Who sends: the engine's driver (``skyrl_engine.alerts``) sends ``failed``, ``stalled`` and ``reward_collapse``;
a process cannot report its own death, so ``lost`` is sent by the notebook that finds the run lost
(``skyrl_nb.jobs.Job.status``, through :func:`alert_lost_run`).

Once per event: an alert's key is its kind and step (:func:`alert_key`); once sent, an ``alert`` event with the
key goes into events.jsonl, and every sender reads those first (:func:`sent_keys`), so a resumed run or a second
notebook does not send it again. The event holds its step as ``at_step``, not ``step``: a resume forgets the
events of the steps it trains again, but keeps those without a step. A send that fails is a ``warning`` event;
it never fails the run.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

from skyrl_core.choices import AlertKind

__all__ = ["ENV_PREFIX", "AlertError", "alert_key", "alert_lost_run", "alert_text", "describe", "masked", "resolve",
           "send", "sent_keys", "webhook_problem"]

KEY = "trainer.alerts.webhook"
ENV_PREFIX = "env:"
#: The variable the docs suggest (any name works).
DEFAULT_ENV = "SKYRL_ALERTS_WEBHOOK"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_SNS_ARN = re.compile(r"^arn:aws[a-z-]*:sns:([a-z0-9-]+):(\d{12}):[A-Za-z0-9_-]{1,256}(\.fifo)?$")
#: Text past this many characters is cut (Slack shows 4,000 before folding; SNS takes 256 KB).
MAX_TEXT = 3000


class AlertError(RuntimeError):
    """An alert that could not be sent, or a destination that cannot be used; one line, no secret in it."""


def masked(destination: str) -> str:
    """``destination`` safe to show: a URL as its scheme and host only (``https://hooks.slack.com/…``); an SNS
    ARN (no secret) as it is; anything else as ``…``.

    >>> masked("https://hooks.slack.com/services/T0/B0/XXXX")
    'https://hooks.slack.com/…'
    """
    if _SNS_ARN.match(destination):
        return destination
    parts = urllib.parse.urlsplit(destination)
    if parts.scheme in ("http", "https") and parts.hostname:
        port = f":{parts.port}" if parts.port else ""
        rest = "/…" if (parts.path not in ("", "/") or parts.query or parts.fragment) else ""
        return f"{parts.scheme}://{parts.hostname}{port}{rest}"
    return "…"


def webhook_problem(value: str) -> str | None:
    """Why ``value`` cannot be ``trainer.alerts.webhook`` (the whole line, key first, the value masked), or None."""
    if value.startswith(ENV_PREFIX):
        if not _ENV_NAME.match(value[len(ENV_PREFIX):]):
            return (f"{KEY}: {value[:140]!r} does not name an environment variable; give env:NAME with NAME letters, "
                    f"digits and '_' (e.g. env:{DEFAULT_ENV})")
        return None
    if value.startswith("arn:"):
        if not _SNS_ARN.match(value):
            return (f"{KEY}: {value[:140]!r} is not an SNS topic ARN; allowed: arn:aws:sns:<region>:<12-digit account>:"
                    f"<topic>, or env:NAME")
        return None
    if urllib.parse.urlsplit(value).scheme in ("http", "https"):
        return (f"{KEY}: a URL ({masked(value)}) is not allowed: a webhook URL carries its token and the config is "
                f"saved with the run; put it in an environment variable where the job runs and give env:NAME "
                f"(e.g. env:{DEFAULT_ENV})")
    return f"{KEY}: a value of {len(value)} characters is not allowed; allowed: env:NAME (the variable holds a " \
           f"webhook URL or an SNS topic ARN), or an SNS topic ARN"


def resolve(webhook: str, environ: Mapping[str, str] | None = None) -> str:
    """The URL or SNS ARN ``webhook`` stands for; :class:`AlertError` (naming the variable, never its value)
    when an ``env:`` variable is unset or holds neither."""
    problem = webhook_problem(webhook)
    if problem:
        raise AlertError(problem)
    if not webhook.startswith(ENV_PREFIX):
        return webhook
    name = webhook[len(ENV_PREFIX):]
    value = (os.environ if environ is None else environ).get(name, "").strip()
    if not value:
        raise AlertError(f"{KEY}: {webhook}: the variable {name} is not set where the alert is "
                         f"sent from (the job's runtime_env env_vars, or the head pod's environment)")
    if not (_SNS_ARN.match(value) or urllib.parse.urlsplit(value).scheme in ("http", "https")):
        raise AlertError(f"{KEY}: {webhook}: the variable {name} holds neither an http(s) URL "
                         f"nor an SNS topic ARN")
    return value


def describe(webhook: str, destination: str | None = None) -> str:
    """How logs and events name where alerts go: ``env:NAME (https://host/…)`` or the ARN."""
    if destination is None or not webhook.startswith(ENV_PREFIX):
        return webhook
    return f"{webhook} ({masked(destination)})"


def alert_key(kind: str, step: int) -> str:
    """The identity of one alert: its kind and step (``stalled@4``); sent once per run."""
    return f"{AlertKind(kind).value}@{int(step)}"


def sent_keys(events: Iterable[Mapping[str, Any]]) -> set[str]:
    """The keys of the alerts already sent for a run (its ``alert`` events)."""
    return {str(e["key"]) for e in events if e.get("kind") == "alert" and e.get("key")}


# what each alert says happened (words of a message, not a run state)
_HEADLINES = {AlertKind.FAILED: "failed", AlertKind.LOST: "was lost",  # not a run state
              AlertKind.STALLED: "stalled", AlertKind.REWARD_COLLAPSE: "reward collapsed"}


def alert_text(kind: str, run_id: str, step: int, detail: str, run_dir: str | None = None) -> tuple[str, str]:
    """``(subject, text)`` of one alert: the subject a line for SNS and e-mail, the text the whole message.

    >>> alert_text("stalled", "r1", 4, "no step for 41 s")[1]
    'skyrl-nb: run r1 stalled at step 4: no step for 41 s'
    """
    headline = _HEADLINES[AlertKind(kind)]
    subject = f"skyrl-nb: run {run_id} {headline} at step {step}"
    text = f"{subject}: {detail}" + (f" (run store: {run_dir})" if run_dir else "")
    return subject[:100], text if len(text) <= MAX_TEXT else text[:MAX_TEXT - 1] + "…"


def send(destination: str, subject: str, text: str, timeout_s: float = 5.0) -> None:
    """Send one alert: POST ``{"text": text}`` to a webhook URL, or publish to an SNS topic ARN. Raises
    :class:`AlertError` with what went wrong and the destination masked."""
    match = _SNS_ARN.match(destination)
    try:
        if match:
            _publish_sns(destination, match.group(1), subject, text, timeout_s)
        else:
            _post(destination, text, timeout_s)
    except AlertError:
        raise
    except Exception as err:  # noqa: BLE001 - urllib, socket, botocore: each said in one line
        why = str(getattr(err, "reason", None) or err).replace(destination, masked(destination))
        raise AlertError(f"the alert to {masked(destination)} was not sent ({type(err).__name__}: {why})") from None


def _post(url: str, text: str, timeout_s: float) -> None:
    import urllib.error  # http's machinery (ssl, http.client) only when an alert goes out: the config imports this
    import urllib.request

    body = json.dumps({"text": text}).encode()
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json", "User-Agent": "skyrl-nb-alerts"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            answer.read(4096)
    except urllib.error.HTTPError as err:
        raise AlertError(f"the alert to {masked(url)} was refused: HTTP {err.code} {err.reason}") from None


def _publish_sns(arn: str, region: str, subject: str, text: str, timeout_s: float) -> None:
    import boto3  # the aws extra; only for an SNS destination
    from botocore.config import Config

    client = boto3.client("sns", region_name=region, config=Config(
        connect_timeout=timeout_s, read_timeout=timeout_s, retries={"max_attempts": 1}))
    # SNS subjects are ASCII without line breaks, at most 100 characters
    clean = "".join(c if 32 <= ord(c) < 127 else "?" for c in subject)[:100]
    client.publish(TopicArn=arn, Subject=clean, Message=text)


def alert_lost_run(run_dir: str, why: str, environ: Mapping[str, str] | None = None) -> str | None:
    """Send the ``lost`` alert of the run in ``run_dir`` (its config's ``trainer.alerts``), once per run and
    step, and record it in its events.jsonl; what the notebook calls when it finds a run lost. ``environ``
    resolves an ``env:`` webhook (default: this process's environment). Returns what happened in one line, or
    None when the run has no alerts for ``lost``; never raises for a send or a store that fails."""
    from skyrl_core.runs import RunReader, RunWriter

    try:
        reader = RunReader(run_dir)
        alerts = ((reader.config().get("trainer") or {}).get("alerts") or {})
        webhook = alerts.get("webhook")
        if not webhook or AlertKind.LOST.value not in alerts.get("events", [k.value for k in AlertKind]):
            return None
        step = int(reader.status().get("step") or 0)
        key = alert_key(AlertKind.LOST, step)
        if key in sent_keys(reader.events()):
            return f"the lost alert of step {step} was already sent"
        run_id = str(((reader.config().get("run") or {}).get("run_id")) or os.path.basename(str(run_dir).rstrip("/")))
        destination = resolve(webhook, environ)
        subject, text = alert_text(AlertKind.LOST, run_id, step, why, str(run_dir))
        send(destination, subject, text, float(alerts.get("timeout_s") or 5.0))
    except AlertError as err:
        return str(err)
    except (OSError, ValueError, TypeError) as err:
        return f"the lost alert was not sent ({type(err).__name__}: {err})"
    where = describe(webhook, destination)
    try:
        RunWriter(run_dir).log_event("alert", at_step=step, alert=AlertKind.LOST.value, key=key, to=where, text=text)
    except OSError as err:
        return f"the lost alert was sent to {where} but not recorded ({err})"
    return f"the lost alert was sent to {where}"
