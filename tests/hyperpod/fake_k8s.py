"""A fake Kubernetes API server with a fake KubeRay operator, for tests.

A real HTTPS server on 127.0.0.1 (self-signed CA the client must pin) speaking the real REST paths:

- ``/apis/ray.io/v1/namespaces/{ns}/rayclusters[/{name}[/status]]``: GET (list / one), POST (validated
  against the KubeRay CRD schema like the API server's structural schema: 422 on violation), PATCH
  (``application/json-patch+json``, RFC 6902 ``test``/``replace``/``add``/``remove``), DELETE;
- ``/api/v1/namespaces/{ns}/{pods,services,secrets}[/{name}]`` with ``labelSelector``;
- ``/api/v1/namespaces/{ns}/pods/{name}/portforward?ports=P``: a WebSocket upgrade with subprotocol
  ``v4.channel.k8s.io`` (channel byte per message, 2-byte LE port preamble on the data and error
  channels), bridged to a real TCP target registered in ``port_targets``;
- ``/apis/connection.access.sagemaker.amazonaws.com/v1alpha1/namespaces/{ns}/raydashboardconnections``:
  POST a ``RayDashboardConnection`` (what AWS's ``sagemaker_ray://`` hook sends) for a cluster registered
  in ``ray_endpoints``; the answer's ``status.connectionUrl`` is that :class:`FakeRayEndpoint`'s URL
  with a fresh bootstrap token (404 for a cluster that has no endpoint).

Requests need ``Authorization: Bearer k8s-aws-v1.<...>`` (401 otherwise); ``forbid(verb, resource)``
makes the server answer 403 with the Status object EKS returns. The "operator" reconciles on every
read: it makes the head Service, the token Secret and the pods, then moves pods Pending -> Running and
``status.state`` to ``ready`` after ``ready_after`` reconciles, or never, for a group of instance types
marked unschedulable (pods stay Pending with the scheduler's message, as on a cluster without capacity).
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import hashlib
import json
import secrets
import select
import socket
import ssl
import struct
import tempfile
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from skyrl_engine.retriever import send_json  # one JSON reply for http.server handlers, the retriever's

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
CONNECTION_GROUP = "connection.access.sagemaker.amazonaws.com"


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def make_self_signed_cert(directory: Path) -> tuple[str, str, str]:
    """(cert path, key path, base64 PEM as EKS returns ``certificateAuthority.data``) for 127.0.0.1."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                       critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM)
    cert_path, key_path = directory / "apiserver.crt", directory / "apiserver.key"
    cert_path.write_bytes(pem)
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_path), str(key_path), base64.b64encode(pem).decode()


def status_failure(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ``metav1.Status`` failure object like the API server's."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "details": details or {}, "code": code}


def _match(labels: dict[str, str], selector: str | None) -> bool:
    if not selector:
        return True
    for term in selector.split(","):
        k, _, v = term.partition("=")
        if labels.get(k.strip()) != v.strip():
            return False
    return True


def _pointer(path: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/")]


def apply_json_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 test/replace/add/remove; raises ValueError (-> 422/409) on a failed op."""
    doc = copy.deepcopy(doc)
    for op in ops:
        *parents, last = _pointer(op["path"])
        target: Any = doc
        for p in parents:
            target = target[int(p)] if isinstance(target, list) else target[p]
        key: Any = int(last) if isinstance(target, list) and last != "-" else last
        if op["op"] == "test":
            if target[key] != op["value"]:
                raise LookupError(f"testing value {op['path']} failed")
        elif op["op"] in ("replace", "add"):
            if isinstance(target, list) and op["op"] == "add":
                target.insert(len(target) if key == "-" else key, op["value"])
            else:
                if op["op"] == "replace" and (key not in target if isinstance(target, dict) else key >= len(target)):
                    raise ValueError(f"replace operation does not apply: doc is missing path: {op['path']}")
                target[key] = op["value"]
        elif op["op"] == "remove":
            del target[key]
        else:
            raise ValueError(f"unsupported op {op['op']}")
    return doc


class _LocalServer:
    """A threading HTTP(S) server on 127.0.0.1 run as a context manager; TLS with a fresh self-signed cert."""

    _tmp: tempfile.TemporaryDirectory[str]

    def _serve(self, handler: type[BaseHTTPRequestHandler], tls: bool) -> tuple[str, str | None, str | None]:
        """Make the server; ``(base URL, cert path, base64 CA data)`` (no cert without TLS)."""
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        cert = ca_data = None
        if tls:
            cert, key, ca_data = make_self_signed_cert(Path(self._tmp.name))
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(cert, key)
            self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        return f"{'https' if tls else 'http'}://127.0.0.1:{self._server.server_address[1]}", cert, ca_data

    def __enter__(self):  # noqa: ANN204
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._tmp.cleanup()


class FakeKubernetes(_LocalServer):
    """The store, the fake operator and the HTTPS server. Use as a context manager."""

    def __init__(self, *, crd_schema: dict[str, Any] | None = None, tls: bool = True, ready_after: int = 2,
                 unschedulable_types: tuple[str, ...] = (), token_prefix: str = "k8s-aws-v1.") -> None:
        self.crd_schema = crd_schema
        self.ready_after = ready_after
        self.unschedulable_types = set(unschedulable_types)
        self.token_prefix = token_prefix
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (kind, ns, name)
        self.forbidden: set[tuple[str, str]] = set()
        self.port_targets: dict[tuple[str, int], tuple[str, int]] = {}  # (pod name | "*head*", port)
        self.requests: list[tuple[str, str]] = []  # (method, path) only: never headers or bodies
        self.bearers: list[str] = []
        self.ray_tokens: dict[str, str] = {}  # cluster -> token (for the secret scan)
        self.ray_endpoints: dict[tuple[str, str], FakeRayEndpoint] = {}  # (ns, cluster) -> its dashboard endpoint
        self.ws_sessions = 0
        self.lock = threading.RLock()
        self._ticks: dict[tuple[str, str], int] = {}
        self._tmp = tempfile.TemporaryDirectory(prefix="fake-k8s-")
        self.tls = tls
        self.ca_data: str | None = None
        self.server, _, self.ca_data = self._serve(_make_handler(self), tls)
        self.port = self._server.server_address[1]

    # -- knobs
    def forbid(self, verb: str, resource: str) -> None:
        """Answer 403 to ``verb`` (get/list/create/patch/delete) on ``resource`` (e.g. rayclusters)."""
        self.forbidden.add((verb, resource))

    def add_object(self, kind: str, ns: str, obj: dict[str, Any]) -> None:
        """Put a pre-existing object (e.g. a Grafana service and pod) into the store."""
        obj.setdefault("metadata", {}).setdefault("namespace", ns)
        self.objects[(kind, ns, obj["metadata"]["name"])] = obj

    # -- the fake operator
    def reconcile(self, ns: str, name: str) -> None:
        """One KubeRay reconcile of RayCluster ns/name."""
        with self.lock:
            rc = self.objects.get(("rayclusters", ns, name))
            if rc is None:
                return
            tick = self._ticks[(ns, name)] = self._ticks.get((ns, name), 0) + 1
            spec = rc["spec"]
            owner = [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": name,
                      "uid": rc["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
            svc_name = f"{name}-head-svc"
            if ("services", ns, svc_name) not in self.objects:
                self.objects[("services", ns, svc_name)] = {
                    "apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": svc_name, "namespace": ns, "ownerReferences": owner,
                                 "labels": {"ray.io/cluster": name, "ray.io/node-type": "head"}},
                    "spec": {"type": "ClusterIP", "clusterIP": "10.100.17.4",
                             "selector": {"ray.io/cluster": name, "ray.io/node-type": "head"},
                             "ports": [{"name": n, "port": p, "protocol": "TCP", "targetPort": p}
                                       for n, p in (("client", 10001), ("dashboard", 8265),
                                                    ("gcs-server", 6379), ("metrics", 8080))]},
                }
            auth = spec.get("authOptions") or {}
            secret_name = auth.get("secretName") or name
            if auth.get("mode") == "token" and ("secrets", ns, secret_name) not in self.objects:
                token = secrets.token_urlsafe(32)
                self.ray_tokens[name] = token
                self.objects[("secrets", ns, secret_name)] = {
                    "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                    "metadata": {"name": secret_name, "namespace": ns, "ownerReferences": owner},
                    "data": {"auth_token": base64.b64encode(token.encode()).decode()},
                }
            # Pods: one head, `replicas` per worker group (extra ones deleted on scale-down).
            wanted = [("head", "headgroup", spec["headGroupSpec"], 1)] + [
                ("worker", g["groupName"], g, int(g.get("replicas", 0))) for g in spec.get("workerGroupSpecs", [])]
            for node_type, group, gspec, count in wanted:
                have = sorted(k for k, p in self.objects.items() if k[0] == "pods" and k[1] == ns
                              and p["metadata"]["labels"].get("ray.io/cluster") == name
                              and p["metadata"]["labels"].get("ray.io/group") == group)
                for key in have[count:]:
                    del self.objects[key]
                for _ in range(count - len(have)):
                    suffix = secrets.token_hex(3)[:5]
                    pod_name = f"{name}-head-{suffix}" if node_type == "head" else f"{name}-{group}-worker-{suffix}"
                    pod_spec = copy.deepcopy(gspec["template"]["spec"])
                    self.objects[("pods", ns, pod_name)] = {
                        "apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": pod_name, "namespace": ns, "ownerReferences": owner,
                                     "creationTimestamp": _now(),
                                     "labels": {"ray.io/cluster": name, "ray.io/node-type": node_type,
                                                "ray.io/group": group, "ray.io/is-ray-node": "yes"}},
                        "spec": pod_spec,
                        "status": {"phase": "Pending", "conditions": [], "_born": tick},
                    }
            # Pod progress.
            for key, pod in self.objects.items():
                if key[0] != "pods" or key[1] != ns or pod["metadata"]["labels"].get("ray.io/cluster") != name:
                    continue
                st = pod["status"]
                itype = pod["spec"].get("nodeSelector", {}).get("node.kubernetes.io/instance-type")
                if itype in self.unschedulable_types:
                    gpus = pod["spec"]["containers"][0]["resources"]["limits"].get("nvidia.com/gpu", 0)
                    st["conditions"] = [{
                        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                        "lastTransitionTime": _now(),
                        "message": (f"0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
                                    f"2 Insufficient nvidia.com/gpu ({gpus} requested). preemption: 0/3 nodes are "
                                    "available: 3 No preemption victims found for incoming pod."),
                    }]
                elif tick - st.get("_born", 0) >= self.ready_after - 1:
                    st["phase"] = "Running"
                    st["podIP"] = f"10.1.0.{abs(hash(key)) % 250 + 2}"
                    pod["spec"]["nodeName"] = f"hyperpod-i-0{abs(hash(key)) % 10**12:012d}"
                    st["conditions"] = [{"type": t, "status": "True", "lastTransitionTime": _now()}
                                        for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")]
                else:
                    st["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": _now()}]
                    st["containerStatuses"] = [{"name": pod["spec"]["containers"][0]["name"], "ready": False,
                                                "state": {"waiting": {"reason": "ContainerCreating"}}}]
                if st["phase"] == "Running":
                    st.pop("containerStatuses", None)
            self._write_status(ns, name, rc, tick)

    def _write_status(self, ns: str, name: str, rc: dict[str, Any], tick: int) -> None:
        pods = [p for k, p in self.objects.items() if k[0] == "pods" and k[1] == ns
                and p["metadata"]["labels"].get("ray.io/cluster") == name]
        head = next((p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "head"), None)
        workers = [p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "worker"]
        ready = [p for p in workers if p["status"]["phase"] == "Running"]
        groups = rc["spec"].get("workerGroupSpecs", [])
        desired = sum(int(g.get("replicas", 0)) for g in groups)
        gpus = sum(int(g.get("replicas", 0)) * int(
            g["template"]["spec"]["containers"][0]["resources"].get("limits", {}).get("nvidia.com/gpu", 0))
            for g in groups)
        head_ready = head is not None and head["status"]["phase"] == "Running"
        all_ready = head_ready and len(ready) == desired
        old = rc.get("status", {})
        now = _now()

        def cond(ctype: str, ok: bool, reason_ok: str, reason_bad: str, msg_bad: str) -> dict[str, Any]:
            prev = next((c for c in old.get("conditions", []) if c["type"] == ctype), None)
            status = "True" if ok else "False"
            when = prev["lastTransitionTime"] if prev and prev["status"] == status else now
            return {"type": ctype, "status": status, "reason": reason_ok if ok else reason_bad,
                    "message": "" if ok else msg_bad, "lastTransitionTime": when}

        state = "ready" if all_ready else old.get("state", "")
        status = {
            "state": state,
            "desiredWorkerReplicas": desired, "availableWorkerReplicas": len(ready),
            "readyWorkerReplicas": len(ready),
            "minWorkerReplicas": sum(int(g.get("minReplicas", 0)) for g in groups),
            "maxWorkerReplicas": sum(int(g.get("maxReplicas", 0)) for g in groups),
            "desiredCPU": "0", "desiredMemory": "0", "desiredGPU": str(gpus), "desiredTPU": "0",
            "endpoints": {"client": "10001", "dashboard": "8265", "gcs-server": "6379", "metrics": "8080"},
            "head": {"podName": head["metadata"]["name"] if head else "", "podIP": (head or {}).get(
                "status", {}).get("podIP", ""), "serviceName": f"{name}-head-svc", "serviceIP": "10.100.17.4"},
            "lastUpdateTime": now, "observedGeneration": rc["metadata"].get("generation", 1),
            "conditions": [
                cond("HeadPodReady", head_ready, "HeadPodRunningAndReady", "HeadPodNotReady",
                     "Head Pod is not ready yet"),
                cond("RayClusterProvisioned", all_ready, "AllPodRunningAndReadyFirstTime",
                     "RayClusterPodsProvisioning", "RayCluster Pods are being provisioned for first time"),
            ],
        }
        if state:
            status["stateTransitionTimes"] = {**old.get("stateTransitionTimes", {}), state: (
                old.get("stateTransitionTimes", {}).get(state) or now)}
        rc["status"] = status

    # -- request handling (called by the handler, under the lock)
    def handle(self, method: str, path: str, query: dict[str, str], body: Any, ctype: str) -> tuple[int, Any]:
        parts = path.strip("/").split("/")
        if parts[:3] == ["apis", CONNECTION_GROUP, "v1alpha1"] and parts[5:] == ["raydashboardconnections"]:
            return self._dashboard_connection(method, parts[4], body)
        if parts[:3] == ["apis", "ray.io", "v1"] and len(parts) >= 6 and parts[3] == "namespaces":
            ns, resource, rest = parts[4], parts[5], parts[6:]
        elif parts[:2] == ["api", "v1"] and len(parts) >= 5 and parts[2] == "namespaces":
            ns, resource, rest = parts[3], parts[4], parts[5:]
        else:
            return 404, status_failure(404, "NotFound", "the server could not find the requested resource")
        if resource not in ("rayclusters", "pods", "services", "secrets"):
            return 404, status_failure(404, "NotFound", "the server could not find the requested resource")
        name = rest[0] if rest else None
        verb = {"GET": "get" if name else "list", "POST": "create", "PATCH": "patch", "DELETE": "delete",
                "PUT": "update"}[method]
        if (verb, resource) in self.forbidden:
            group = "ray.io" if resource == "rayclusters" else ""
            msg = (f'{resource}{"." + group if group else ""}{" " + repr(name) if name else ""} is forbidden: '
                   f'User "arn:aws:sts::123456789012:assumed-role/AmazonSageMaker-ExecutionRole/SageMaker" '
                   f'cannot {verb} resource "{resource}" in API group "{group}" in the namespace "{ns}"')
            return 403, status_failure(403, "Forbidden", msg, {"name": name or "", "group": group, "kind": resource})
        if resource == "rayclusters" and verb in ("get", "list"):
            for k in [k for k in self.objects if k[:2] == ("rayclusters", ns) and (name is None or k[2] == name)]:
                self.reconcile(ns, k[2])
        key = (resource, ns, name or "")
        if verb == "list":
            items = [copy.deepcopy(o) for k, o in sorted(self.objects.items())
                     if k[:2] == (resource, ns) and _match(o["metadata"].get("labels", {}), query.get("labelSelector"))]
            for o in items:
                o.get("status", {}).pop("_born", None)
            kind = {"rayclusters": "RayClusterList", "pods": "PodList", "services": "ServiceList",
                    "secrets": "SecretList"}[resource]
            return 200, {"apiVersion": "ray.io/v1" if resource == "rayclusters" else "v1", "kind": kind,
                         "metadata": {"resourceVersion": "1"}, "items": items}
        if verb == "create":
            if resource != "rayclusters":
                return 405, status_failure(405, "MethodNotAllowed", "create only rayclusters here")
            rc_name = body.get("metadata", {}).get("name")
            if ("rayclusters", ns, rc_name) in self.objects:
                return 409, status_failure(409, "AlreadyExists", f'rayclusters.ray.io "{rc_name}" already exists')
            problems = self.validate(body)
            if problems:
                return 422, status_failure(422, "Invalid", f'RayCluster.ray.io "{rc_name}" is invalid: '
                                           + "; ".join(problems))
            obj = copy.deepcopy(body)
            obj["metadata"].update({"namespace": ns, "uid": secrets.token_hex(16), "generation": 1,
                                    "creationTimestamp": _now(), "resourceVersion": "1"})
            self.objects[("rayclusters", ns, rc_name)] = obj
            return 201, obj
        if key not in self.objects:
            what = f"{resource}.ray.io" if resource == "rayclusters" else resource
            return 404, status_failure(404, "NotFound", f'{what} "{name}" not found',
                                       {"name": name, "kind": resource})
        if verb == "get":
            obj = copy.deepcopy(self.objects[key])
            obj.get("status", {}).pop("_born", None)
            return 200, obj
        if verb == "patch":
            if ctype != "application/json-patch+json":
                return 415, status_failure(415, "UnsupportedMediaType", f"unsupported patch type {ctype}")
            try:
                new = apply_json_patch(self.objects[key], body)
            except LookupError as e:
                return 422, status_failure(422, "Invalid", str(e))
            except (ValueError, KeyError, IndexError) as e:
                return 422, status_failure(422, "Invalid", f"the server rejected our request: {e}")
            problems = self.validate(new)
            if problems:
                return 422, status_failure(422, "Invalid", "; ".join(problems))
            new["metadata"]["generation"] = new["metadata"].get("generation", 1) + 1
            self.objects[key] = new
            return 200, new
        if verb == "delete":
            obj = self.objects.pop(key)
            if resource == "rayclusters":
                uid = obj["metadata"]["uid"]
                for k in [k for k, o in self.objects.items()
                          if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences", []))]:
                    del self.objects[k]
            return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success",
                         "details": {"name": name, "group": "ray.io", "kind": resource, "uid": obj["metadata"].get("uid")}}
        return 405, status_failure(405, "MethodNotAllowed", method)

    def _dashboard_connection(self, method: str, ns: str, body: Any) -> tuple[int, Any]:
        """The Extension API server's token vending: a bootstrap JWT for the caller's own cluster."""
        if method != "POST" or not isinstance(body, dict) or body.get("kind") != "RayDashboardConnection":
            return 405, status_failure(405, "MethodNotAllowed", "POST a RayDashboardConnection")
        cluster = (body.get("spec") or {}).get("clusterName")
        endpoint = self.ray_endpoints.get((ns, cluster))
        if endpoint is None:
            return 404, status_failure(404, "NotFound", f'rayclusters.ray.io "{cluster}" not found')
        name = (body.get("metadata") or {}).get("generateName", "conn-") + secrets.token_hex(3)
        return 201, {**body, "metadata": {**body["metadata"], "name": name, "namespace": ns},
                     "status": {"connectionUrl": f"{endpoint.url}/?token={endpoint.issue_token()}"}}

    def validate(self, obj: dict[str, Any]) -> list[str]:
        """CRD schema violations of a RayCluster (empty when valid or no schema was given)."""
        if self.crd_schema is None:
            return []
        import jsonschema

        validator = jsonschema.Draft202012Validator(self.crd_schema)
        return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj)]


def _make_handler(fake: FakeKubernetes) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # the fake keeps (method, path) in fake.requests
            pass

        def _send(self, code: int, obj: Any) -> None:
            send_json(self, code, obj)

        def _auth(self) -> bool:
            auth = self.headers.get("Authorization", "")
            if not auth.startswith("Bearer " + fake.token_prefix):
                self._send(401, status_failure(401, "Unauthorized", "Unauthorized"))
                return False
            fake.bearers.append(auth[len("Bearer "):])
            return True

        def _dispatch(self, method: str) -> None:
            url = urllib.parse.urlsplit(self.path)
            query = dict(urllib.parse.parse_qsl(url.query))
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            with fake.lock:
                fake.requests.append((method, url.path))
            if not self._auth():
                return
            if url.path.endswith("/portforward") and method == "GET":
                self._portforward(url.path, query)
                return
            body = json.loads(raw) if raw else None
            with fake.lock:
                code, obj = fake.handle(method, url.path, query, body,
                                        (self.headers.get("Content-Type") or "").split(";")[0])
            self._send(code, obj)

        def do_GET(self) -> None:  # noqa: N802
            self._dispatch("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._dispatch("POST")

        def do_PATCH(self) -> None:  # noqa: N802
            self._dispatch("PATCH")

        def do_DELETE(self) -> None:  # noqa: N802
            self._dispatch("DELETE")

        # -- WebSocket port-forward
        def _portforward(self, path: str, query: dict[str, str]) -> None:
            parts = path.strip("/").split("/")  # api v1 namespaces ns pods name portforward
            ns, pod = parts[3], parts[5]
            if ("get", "pods/portforward") in fake.forbidden:
                self._send(403, status_failure(403, "Forbidden", f'pods "{pod}" is forbidden: User cannot '
                                               f'create resource "pods/portforward" in the namespace "{ns}"'))
                return
            with fake.lock:
                pod_obj = fake.objects.get(("pods", ns, pod))
            if pod_obj is None:
                self._send(404, status_failure(404, "NotFound", f'pods "{pod}" not found'))
                return
            if self.headers.get("Upgrade", "").lower() != "websocket":
                self._send(400, status_failure(400, "BadRequest", "Upgrade request required"))
                return
            protocols = [p.strip() for p in self.headers.get("Sec-WebSocket-Protocol", "").split(",")]
            if "v4.channel.k8s.io" not in protocols:
                self._send(400, status_failure(400, "BadRequest", f"unsupported subprotocols {protocols}"))
                return
            port = int(query["ports"])
            accept = base64.b64encode(hashlib.sha1((self.headers["Sec-WebSocket-Key"] + WS_GUID).encode())
                                      .digest()).decode()
            self.send_response(101, "Switching Protocols")
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.send_header("Sec-WebSocket-Accept", accept)
            self.send_header("Sec-WebSocket-Protocol", "v4.channel.k8s.io")
            self.end_headers()
            self.wfile.flush()
            fake.ws_sessions += 1
            # Like the API server, one loop copies both ways; unlike Go's TLS, an OpenSSL connection
            # must not be read in one thread while another writes, so this fake uses one thread too.
            sock = self.connection

            def send(payload: bytes, opcode: int = 2) -> None:
                header = bytes([0x80 | opcode])
                n = len(payload)
                header += bytes([n]) if n < 126 else (bytes([126]) + struct.pack(">H", n) if n < 65536
                                                      else bytes([127]) + struct.pack(">Q", n))
                sock.sendall(header + payload)

            preamble = struct.pack("<H", port)
            send(b"\x00" + preamble)
            send(b"\x01" + preamble)
            is_head = pod_obj["metadata"]["labels"].get("ray.io/node-type") == "head"
            target = fake.port_targets.get((pod, port)) or (fake.port_targets.get(("*head*", port)) if is_head else None)
            try:
                if target is None:
                    raise ConnectionRefusedError("connection refused")
                backend = socket.create_connection(target, timeout=10)
            except OSError as e:
                send(b"\x01" + f"error forwarding port {port} to pod {pod}: failed to connect to localhost:"
                     f"{port} inside namespace: {e}".encode())
                send(struct.pack(">H", 1000), opcode=8)
                return
            backend.settimeout(None)
            buf = bytearray()
            try:
                while True:
                    if isinstance(sock, ssl.SSLSocket) and sock.pending():
                        readable = [sock]
                    else:
                        readable, _, _ = select.select([sock, backend], [], [], 10.0)
                        if not readable:
                            continue
                    if backend in readable:
                        data = backend.recv(65536)
                        if not data:  # the pod's port closed the connection
                            send(struct.pack(">H", 1000), opcode=8)
                            break
                        send(b"\x00" + data)
                    if sock in readable:
                        data = sock.recv(65536)
                        if not data:
                            break
                        buf += data
                        closing = False
                        while (frame := _parse_frame(buf)) is not None:
                            opcode, payload = frame
                            if opcode == 8:  # the client closed: answer and stop
                                send(struct.pack(">H", 1000), opcode=8)
                                closing = True
                                break
                            if opcode == 9:
                                send(payload, opcode=10)
                            elif opcode in (1, 2) and payload and payload[0] == 0:
                                backend.sendall(payload[1:])
                        if closing:
                            break
            except (OSError, ConnectionError, struct.error):
                pass
            finally:
                try:
                    backend.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                backend.close()
                self.close_connection = True

    return Handler


def _parse_frame(buf: bytearray) -> tuple[int, bytes] | None:
    """Take one whole WebSocket frame off the front of ``buf``; None while it is incomplete."""
    if len(buf) < 2:
        return None
    opcode, masked, n = buf[0] & 0x0F, buf[1] & 0x80, buf[1] & 0x7F
    at = 2
    if n == 126:
        if len(buf) < 4:
            return None
        n, at = struct.unpack(">H", buf[2:4])[0], 4
    elif n == 127:
        if len(buf) < 10:
            return None
        n, at = struct.unpack(">Q", buf[2:10])[0], 10
    mask = bytes(buf[at:at + 4]) if masked else b"\x00\x00\x00\x00"
    at += 4 if masked else 0
    if len(buf) < at + n:
        return None
    payload = bytes(b ^ mask[i % 4] for i, b in enumerate(buf[at:at + n]))
    del buf[:at + n]
    return opcode, payload


class FakeRayDashboard:
    """A tiny Ray dashboard stand-in: ``/api/version`` and ``/api/jobs/`` behind a bearer token."""

    def __init__(self, token: str | None = None) -> None:
        self.token = token
        self.hits: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                outer.hits.append(self.path)
                if outer.token and self.headers.get("Authorization") != f"Bearer {outer.token}":
                    code, obj = 401, {"error": "Unauthorized: Missing authentication token"}
                elif self.path.startswith("/api/version"):
                    code, obj = 200, {"version": "4", "ray_version": "2.52.1", "ray_commit": "fake"}
                elif self.path.startswith("/api/jobs"):
                    code, obj = 200, []
                else:
                    code, obj = 404, {"error": "not found"}
                send_json(self, code, obj)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.address = self._server.server_address[:2]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FakeRayDashboard:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


class FakeRayEndpoint(_LocalServer):
    """A HyperPod Ray dashboard endpoint in front of a real Ray dashboard, as ``sagemaker_ray://`` reaches it.

    HTTPS on 127.0.0.1 (self-signed: trust ``ca_path``, e.g. with ``REQUESTS_CA_BUNDLE``).
    ``GET /bearer-auth?token=T`` trades a bootstrap token from :meth:`issue_token` (once) for a
    ``ray_session`` cookie; every other request needs that cookie and is forwarded to ``dashboard`` with
    the cluster's own bearer token (``ray_token``), which the caller never sees.
    """

    COOKIE = "ray_session"

    def __init__(self, dashboard: str, ray_token: str | None = None) -> None:
        import urllib.request

        self.dashboard = dashboard.rstrip("/")
        self._tokens: set[str] = set()
        self._sessions: set[str] = set()
        self.forwarded: list[tuple[str, str]] = []  # (method, path)
        self._tmp = tempfile.TemporaryDirectory(prefix="fake-ray-endpoint-")
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, code: int, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(code)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _handle(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if url.path == "/bearer-auth":
                    token = dict(urllib.parse.parse_qsl(url.query)).get("token")
                    if token not in outer._tokens:
                        self._reply(401, b"bootstrap token rejected", {})
                        return
                    outer._tokens.discard(token)
                    session = secrets.token_hex(16)
                    outer._sessions.add(session)
                    self._reply(200, b"ok", {"Set-Cookie": f"{outer.COOKIE}={session}; Path=/; Secure; HttpOnly"})
                    return
                cookies = dict(c.strip().split("=", 1) for c in (self.headers.get("Cookie") or "").split(";") if "=" in c)
                if cookies.get(outer.COOKIE) not in outer._sessions:
                    self._reply(401, b"no session", {})
                    return
                outer.forwarded.append((self.command, url.path))
                headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "accept")}
                if ray_token:
                    headers["Authorization"] = f"Bearer {ray_token}"
                request = urllib.request.Request(outer.dashboard + self.path, data=body, method=self.command,
                                                 headers=headers)
                try:
                    with urllib.request.urlopen(request, timeout=60) as resp:
                        code, data, ctype = resp.status, resp.read(), resp.headers.get("Content-Type", "")
                except urllib.error.HTTPError as err:
                    code, data, ctype = err.code, err.read(), err.headers.get("Content-Type", "")
                self._reply(code, data, {"Content-Type": ctype} if ctype else {})

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _handle  # noqa: N815

        self.url, self.ca_path, _ = self._serve(Handler, tls=True)

    def issue_token(self) -> str:
        """A one-use bootstrap token (the JWT the Extension API server signs)."""
        token = secrets.token_urlsafe(24)
        self._tokens.add(token)
        return token
