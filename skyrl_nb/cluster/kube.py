"""EKS authentication and a small Kubernetes REST client (no kubectl, no kubeconfig).

Three pieces, each usable on its own:

- :class:`EksTokenSource` makes the bearer token EKS accepts: ``k8s-aws-v1.`` + base64url of a
  presigned STS ``GetCallerIdentity`` URL that signs the ``x-k8s-aws-id: <eks cluster>`` header
  (aws-iam-authenticator's construction, the same one ``aws eks get-token`` prints). The URL carries
  ``X-Amz-Expires=60``; EKS honours such a token for 15 minutes from signing, so the source hands out
  a cached token for :data:`TOKEN_LIFETIME_S` and makes a fresh one ``refresh_margin_s`` before that.
- :class:`KubeClient` speaks JSON to the API server over TLS pinned to the cluster's CA, with the
  token source above, and turns error ``Status`` objects into :class:`KubeError` with a readable
  message (a 403 names the EKS access entry to grant).
- :class:`PortForward` forwards a local TCP port to a pod port through the API server's
  ``pods/portforward`` subresource over WebSocket (``v4.channel.k8s.io``), one WebSocket per
  accepted TCP connection, like ``kubectl port-forward``.

boto3 and websocket-client are imported inside the functions that use them.

One idea, talking to EKS's Kubernetes API without kubectl: the token, the client and port-forwarding it needs.
"""

from __future__ import annotations

import base64
import json
import logging
import select
import socket
import ssl
import struct
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from html import escape
from typing import Any

log = logging.getLogger(__name__)

TOKEN_PREFIX = "k8s-aws-v1."
#: Seconds the presigned URL inside the token says it is valid for (``X-Amz-Expires``).
PRESIGN_EXPIRES_S = 60
#: Seconds we treat a token as usable: EKS accepts it for 15 min from signing; aws-cli reports 14.
TOKEN_LIFETIME_S = 14 * 60

ACCESS_ENTRY_HINT = (
    "Your IAM principal has no Kubernetes permission for this in the HyperPod cluster's EKS cluster. "
    "Grant it through an EKS access entry: `aws eks create-access-entry --cluster-name {eks} "
    "--principal-arn <your role ARN>`, then associate the HyperPod cluster-access policy "
    "AmazonSagemakerHyperpodTrainingPolicy (RayCluster, RayJob; scope it to namespace '{namespace}') with "
    "`aws eks associate-access-policy --cluster-name {eks} --principal-arn <your role ARN> "
    "--policy-arn arn:aws:eks::aws:cluster-access-policy/AmazonSagemakerHyperpodTrainingPolicy "
    "--access-scope type=namespace,namespaces={namespace}`, or AmazonEKSClusterAdminPolicy "
    "(--access-scope type=cluster) for full admin. For a SageMaker Studio domain execution role the "
    "HyperPod console can create the entry for you. The EKS cluster's authentication mode must include "
    "API (API or API_AND_CONFIG_MAP)."
)


def redact(text: str, secrets: list[str | None]) -> str:
    """Return ``text`` with every non-empty string of ``secrets`` replaced by ``***``."""
    for s in secrets:
        if s:
            text = text.replace(s, "***")
    return text


# --------------------------------------------------------------------------- EKS token


def presigned_caller_identity_url(
    eks_cluster: str, *, region: str, session: Any = None, expires_in: int = PRESIGN_EXPIRES_S
) -> str:
    """Presign ``GET https://sts.<region>.amazonaws.com/?Action=GetCallerIdentity`` with the
    ``x-k8s-aws-id`` header signed (SigV4 query auth), as aws-iam-authenticator expects."""
    import boto3
    from botocore.signers import RequestSigner

    session = session or boto3.Session(region_name=region)
    credentials = session.get_credentials()
    if credentials is None:
        raise RuntimeError(
            "No AWS credentials found to sign the EKS token. In SageMaker Studio the execution role "
            "provides them; elsewhere set AWS_PROFILE or AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY."
        )
    sts = session.client("sts", region_name=region)
    signer = RequestSigner(
        sts.meta.service_model.service_id, region, "sts", "v4", credentials, session.events
    )
    request = {
        "method": "GET",
        "url": f"https://sts.{region}.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15",
        "body": {},
        "headers": {"x-k8s-aws-id": eks_cluster},
        "context": {},
    }
    return signer.generate_presigned_url(
        request, region_name=region, expires_in=expires_in, operation_name=""
    )


def eks_token(eks_cluster: str, *, region: str, session: Any = None) -> str:
    """One EKS bearer token: ``k8s-aws-v1.`` + unpadded base64url of the presigned STS URL."""
    url = presigned_caller_identity_url(eks_cluster, region=region, session=session)
    return TOKEN_PREFIX + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


@dataclass(eq=False, repr=False)
class EksTokenSource:
    """Hands out an EKS bearer token, making a new one ``refresh_margin_s`` before it expires.

    ``session`` is a boto3 session (None: the default one); ``clock`` tells the time (tests move it).

    >>> tokens = EksTokenSource("my-eks", region="us-west-2")   # doctest: +SKIP
    >>> headers = {"Authorization": f"Bearer {tokens.token()}"}  # doctest: +SKIP
    """

    eks_cluster: str
    _: KW_ONLY
    region: str
    session: Any = None
    lifetime_s: float = TOKEN_LIFETIME_S
    refresh_margin_s: float = 60.0
    clock: Callable[[], float] = time.time
    refreshes: int = field(default=0, init=False)
    _token: str | None = field(default=None, init=False)
    _expires_at: float = field(default=0.0, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    @property
    def expires_at(self) -> float:
        """Unix time after which the current token is no longer accepted (0 before the first)."""
        return self._expires_at

    def token(self) -> str:
        """The current token; a fresh one when the cached one is within the refresh margin."""
        with self._lock:
            now = self.clock()
            if self._token is None or now >= self._expires_at - self.refresh_margin_s:
                self._token = eks_token(self.eks_cluster, region=self.region, session=self.session)
                self._expires_at = now + self.lifetime_s
                self.refreshes += 1
                log.debug("new EKS token for %s (valid until %.0f)", self.eks_cluster, self._expires_at)
            return self._token

    def __call__(self) -> str:
        return self.token()

    def __repr__(self) -> str:
        return f"EksTokenSource(eks_cluster={self.eks_cluster!r}, region={self.region!r}, token=<redacted>)"

    def _repr_html_(self) -> str:
        return f"<code>EksTokenSource</code> for EKS <b>{escape(self.eks_cluster)}</b> ({escape(self.region)}), token redacted"


def exec_credential(eks_cluster: str, region: str) -> dict[str, Any]:
    """The ``ExecCredential`` a kubeconfig ``exec`` plugin prints: a fresh EKS token and when it expires.

    ``python -m skyrl_nb.cluster.kube token <eks cluster> <region>`` prints it, so a kubeconfig written for
    AWS's ``sagemaker_ray://`` toolkit (`skyrl_nb.cluster.hyperpod_connect`) signs with this interpreter's
    boto3 credentials, needs no AWS CLI and holds no token."""
    import datetime as dt

    expires = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=TOKEN_LIFETIME_S)
    return {"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential",
            "status": {"token": eks_token(eks_cluster, region=region),
                       "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ")}}


# --------------------------------------------------------------------------- REST client


class KubeError(RuntimeError):
    """A Kubernetes API call failed; ``status`` is the HTTP code, ``reason`` the Status reason."""

    def __init__(self, message: str, *, status: int, reason: str = "", method: str = "", path: str = ""):
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.method = method
        self.path = path


class KubeForbidden(KubeError):
    """HTTP 403 from the API server: the IAM principal lacks Kubernetes permissions."""


class KubeUnauthorized(KubeError):
    """HTTP 401 from the API server: the token was not accepted (expired, wrong cluster, no access entry)."""


class KubeNotFound(KubeError):
    """HTTP 404 from the API server."""


class KubeConflict(KubeError):
    """HTTP 409 from the API server (already exists, or a patch test failed)."""


_ERRORS = {401: KubeUnauthorized, 403: KubeForbidden, 404: KubeNotFound, 409: KubeConflict}


def _ssl_context(ca_data: str | None, verify: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    if ca_data:
        try:
            pem = ca_data if "BEGIN CERTIFICATE" in ca_data else base64.b64decode(ca_data).decode()
            ctx = ssl.create_default_context(cadata=pem)
        except (ValueError, ssl.SSLError) as e:
            raise ValueError(
                f"The cluster CA (certificateAuthority.data) is not a base64 PEM certificate: {e}"
            ) from None
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


class KubeClient:
    """A JSON client for the Kubernetes REST API.

    ``server`` is the API endpoint (``https://XXXX.gr7.<region>.eks.amazonaws.com``); ``ca_data`` the
    cluster CA (base64 PEM as EKS returns it, or PEM text); ``token`` a string or a callable returning
    the current bearer token (e.g. :class:`EksTokenSource`). ``eks_cluster`` only feeds error messages.
    """

    def __init__(
        self,
        server: str,
        *,
        token: str | Callable[[], str] | None = None,
        ca_data: str | None = None,
        verify: bool = True,
        timeout: float = 30.0,
        eks_cluster: str | None = None,
    ) -> None:
        self.server = server.rstrip("/")
        self._token = token
        self._ca_data = ca_data
        self._verify = verify
        self.timeout = timeout
        self.eks_cluster = eks_cluster
        self._ssl: ssl.SSLContext | None = None

    # -- plumbing
    def bearer(self) -> str | None:
        """The bearer token to send now (calls the token source)."""
        return self._token() if callable(self._token) else self._token

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context pinned to the cluster CA (``None`` for a plain-HTTP server); made on first use."""
        if self._ssl is None and self.server.startswith("https"):
            self._ssl = _ssl_context(self._ca_data, self._verify)
        return self._ssl

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        """Send one request; return the decoded JSON body or raise :class:`KubeError`."""
        url = self.server + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json", "User-Agent": "skyrl-nb"}
        if data is not None:
            headers["Content-Type"] = content_type
        token = self.bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        req = urllib.request.Request(url, data=data, headers=headers, method=method)
        log.debug("k8s %s %s", method, path)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self.ssl_context) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            raise self._error(method, path, e.code, e.read()) from None
        except urllib.error.URLError as e:
            raise ConnectionError(f"Cannot reach the Kubernetes API at {self.server}: {e.reason}") from None
        return json.loads(raw) if raw else {}

    def _error(self, method: str, path: str, code: int, raw: bytes) -> KubeError:
        try:
            status = json.loads(raw)
        except ValueError:
            status = {"message": raw.decode(errors="replace")[:300]}
        reason = status.get("reason", "")
        message = f"{method} {path} -> HTTP {code} {reason}: {status.get('message', '')}".rstrip(": ")
        if code == 403:
            ns = path.split("/namespaces/")[1].split("/")[0] if "/namespaces/" in path else "default"
            message += ". " + ACCESS_ENTRY_HINT.format(eks=self.eks_cluster or "<eks cluster>", namespace=ns)
        elif code == 401:
            message += (
                ". The API server rejected the EKS token: check the region and cluster name it was "
                "signed for, the machine clock, and that an EKS access entry exists for your IAM principal."
            )
        return _ERRORS.get(code, KubeError)(message, status=code, reason=reason, method=method, path=path)

    # -- verbs
    def get(self, path: str, **query: str) -> dict[str, Any]:
        """GET ``path`` (query parameters as keywords, e.g. ``labelSelector=...``)."""
        return self.request("GET", path, query=query or None)

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to the collection ``path``."""
        return self.request("POST", path, body)

    def json_patch(self, path: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
        """PATCH with an RFC 6902 JSON patch (exact list indexes, ``test`` ops guard races)."""
        return self.request("PATCH", path, ops, content_type="application/json-patch+json")

    def delete(self, path: str) -> dict[str, Any]:
        """DELETE ``path`` with foreground propagation (dependents go first)."""
        return self.request("DELETE", path, {"kind": "DeleteOptions", "apiVersion": "v1",
                                              "propagationPolicy": "Foreground"})

    def __repr__(self) -> str:
        return f"KubeClient(server={self.server!r}, eks_cluster={self.eks_cluster!r}, token=<redacted>)"

    def _repr_html_(self) -> str:
        return (f"<code>KubeClient</code> → <code>{escape(self.server)}</code>"
                f" (EKS {escape(str(self.eks_cluster))}), token redacted")


def eks_kube_client(
    eks_cluster_arn_or_name: str, *, region: str, session: Any = None, verify: bool = True
) -> KubeClient:
    """A :class:`KubeClient` for an EKS cluster: endpoint and CA from ``eks.describe_cluster``,
    bearer tokens from :class:`EksTokenSource` (refreshed before they expire)."""
    import boto3

    session = session or boto3.Session(region_name=region)
    name = eks_cluster_arn_or_name.rsplit("/", 1)[-1]
    cluster = session.client("eks", region_name=region).describe_cluster(name=name)["cluster"]
    if cluster.get("status") not in (None, "ACTIVE", "UPDATING"):
        raise RuntimeError(f"EKS cluster {name!r} is {cluster.get('status')}, not ACTIVE.")
    tokens = EksTokenSource(name, region=region, session=session)
    return KubeClient(
        cluster["endpoint"],
        token=tokens,
        ca_data=cluster["certificateAuthority"]["data"],
        verify=verify,
        eks_cluster=name,
    )


# --------------------------------------------------------------------------- port-forward

PORTFORWARD_PROTOCOL = "v4.channel.k8s.io"


class PortForward:
    """Forward ``127.0.0.1:<local_port>`` to ``pod:port`` through the API server.

    Each accepted TCP connection opens its own WebSocket to
    ``/api/v1/namespaces/{ns}/pods/{pod}/portforward?ports={port}``. On that socket every binary
    message starts with a channel byte: 0 carries data, 1 errors; the first message on each channel
    is the port number (2 bytes, little endian). Close with :meth:`close` (or use as a context manager).

    ``find_pod`` (optional) names the pod again when the current one is gone (404), e.g. after HyperPod
    replaced a node and KubeRay recreated the head under a new name: the next connection follows it.
    """

    def __init__(self, kube: KubeClient, namespace: str, pod: str, port: int, *, local_port: int = 0,
                 find_pod: Callable[[], str] | None = None):
        self.kube = kube
        self.namespace = namespace
        self.pod = pod
        self.port = port
        self._find_pod = find_pod
        self._listener = socket.create_server(("127.0.0.1", local_port))
        self.local_port: int = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._sockets: set[Any] = set()
        self._lock = threading.Lock()
        self.errors: list[str] = []
        self.connections = 0
        self._thread = threading.Thread(target=self._accept_loop, name=f"portforward-{pod}:{port}", daemon=True)
        self._thread.start()
        log.info("port-forward 127.0.0.1:%d -> %s/%s:%d", self.local_port, namespace, pod, port)

    @property
    def address(self) -> str:
        """``http://127.0.0.1:<local_port>``."""
        return f"http://127.0.0.1:{self.local_port}"

    @property
    def path(self) -> str:
        """The API server path of the portforward subresource."""
        return f"/api/v1/namespaces/{self.namespace}/pods/{self.pod}/portforward?ports={self.port}"

    def _ws_url(self) -> str:
        base = self.kube.server.replace("https://", "wss://", 1).replace("http://", "ws://", 1)
        return base + self.path

    def _open_ws(self) -> Any:
        import websocket

        sslopt: dict[str, Any] = {}
        if self.kube.ssl_context is not None:
            sslopt = {"context": self.kube.ssl_context}
        headers = [f"Authorization: Bearer {self.kube.bearer()}"]
        try:
            ws = websocket.create_connection(
                self._ws_url(), header=headers, subprotocols=[PORTFORWARD_PROTOCOL],
                sslopt=sslopt, timeout=self.kube.timeout, enable_multithread=True,
            )
        except websocket.WebSocketBadStatusException as e:
            raise self.kube._error("GET", self.path, e.status_code, e.resp_body or b"") from None
        # The server announces the port on the data and the error channel before any data.
        for _ in range(2):
            opcode, frame = ws.recv_data()
            if len(frame) != 3 or struct.unpack("<H", frame[1:3])[0] != self.port:
                raise KubeError(f"Unexpected port-forward preamble {frame[:8]!r}", status=0)
        return ws

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        self.connections += 1
        try:
            try:
                ws = self._open_ws()
            except KubeNotFound:
                if self._find_pod is None:
                    raise
                old, self.pod = self.pod, self._find_pod()
                log.info("pod %s is gone; port-forward follows %s", old, self.pod)
                ws = self._open_ws()
        except Exception as e:  # reported to the caller through .errors, the TCP peer sees a close
            self.errors.append(str(e))
            log.warning("port-forward to %s:%d failed: %s", self.pod, self.port, e)
            conn.close()
            return
        with self._lock:
            self._sockets.update((conn, ws))
        try:
            self._pump(conn, ws)
        except Exception as e:  # the server went away, or close() shut the sockets
            if not self._closed.is_set():
                log.debug("port-forward connection ended: %s: %s", type(e).__name__, e)
        finally:
            _quiet(conn.shutdown, socket.SHUT_RDWR)
            _quiet(conn.close)
            _quiet(ws.shutdown)
            with self._lock:
                self._sockets.difference_update((conn, ws))

    def _pump(self, conn: socket.socket, ws: Any) -> None:
        """Copy bytes both ways until either end closes, all in this one thread.

        One thread, because the WebSocket is usually TLS, and an OpenSSL connection must not be read
        in one thread while another writes to it: with a reader and a writer thread, about one request
        in thirty lost its connection without a response.
        """
        import websocket

        raw = ws.sock
        local_open = True
        deadline: float | None = None  # after the local side closed: how long to wait for the server
        while not self._closed.is_set():
            watch = [raw, conn] if local_open else [raw]
            if isinstance(raw, ssl.SSLSocket) and raw.pending():
                readable = [raw]  # decrypted bytes already buffered: select would not see them
            else:
                readable, _, _ = select.select(watch, [], [], 1.0)
            if conn in readable:
                data = conn.recv(65536)
                if data:
                    ws.send_binary(b"\x00" + data)
                else:  # the local client is done: tell the server, then wait for its close frame
                    local_open = False
                    ws.send_close()
                    deadline = time.monotonic() + self.kube.timeout
            if raw in readable:
                opcode, frame = ws.recv_data()
                if opcode == websocket.ABNF.OPCODE_CLOSE or not frame:
                    return
                if frame[0] == 0:
                    conn.sendall(frame[1:])
                elif frame[0] == 1 and len(frame) > 1:
                    self.errors.append(frame[1:].decode(errors="replace"))
                    log.warning("port-forward error from the API server: %s", self.errors[-1])
            if deadline is not None and time.monotonic() > deadline:
                return

    def close(self) -> None:
        """Stop listening and close every open tunnel."""
        self._closed.set()
        _quiet(self._listener.close)
        with self._lock:
            for s in list(self._sockets):
                # Shut down, never close, from here: each connection's own thread wakes up and closes
                # its sockets, so no descriptor is freed while another thread still reads it.
                raw = s if isinstance(s, socket.socket) else getattr(s, "sock", None)
                if raw is not None:
                    _quiet(raw.shutdown, socket.SHUT_RDWR)

    def __enter__(self) -> PortForward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def is_open(self) -> bool:
        """True until :meth:`close`."""
        return not self._closed.is_set()

    def __repr__(self) -> str:
        state = "open" if self.is_open else "closed"
        return (f"PortForward(127.0.0.1:{self.local_port} -> {self.namespace}/{self.pod}:{self.port}, "
                f"{state}, connections={self.connections})")

    def _repr_html_(self) -> str:
        return f"<code>{escape(repr(self))}</code>"


def _quiet(fn: Callable[..., Any], *args: Any) -> None:
    try:
        fn(*args)
    except Exception:
        pass


@dataclass(frozen=True)
class ApiPaths:
    """The REST paths skyrl-nb uses (core v1 and ray.io/v1)."""

    namespace: str

    def rayclusters(self, name: str | None = None) -> str:
        base = f"/apis/ray.io/v1/namespaces/{self.namespace}/rayclusters"
        return f"{base}/{name}" if name else base

    def pods(self, name: str | None = None) -> str:
        base = f"/api/v1/namespaces/{self.namespace}/pods"
        return f"{base}/{name}" if name else base

    def services(self, name: str | None = None) -> str:
        base = f"/api/v1/namespaces/{self.namespace}/services"
        return f"{base}/{name}" if name else base

    def secret(self, name: str) -> str:
        return f"/api/v1/namespaces/{self.namespace}/secrets/{name}"

    def _repr_html_(self) -> str:
        return f"<code>{escape(repr(self))}</code>"


if __name__ == "__main__":  # the kubeconfig exec plugin: python -m skyrl_nb.cluster.kube token <eks> <region>
    import sys

    if len(sys.argv) != 4 or sys.argv[1] != "token":
        raise SystemExit("usage: python -m skyrl_nb.cluster.kube token <eks cluster> <region>")
    print(json.dumps(exec_credential(sys.argv[2], sys.argv[3])))
