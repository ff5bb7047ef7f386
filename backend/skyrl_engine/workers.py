"""The engine's one worker seam: role handles for the generator, the policy, the critic and the reference.

Every loop and schedule talks to ``Workers`` and nothing else; each role is a :class:`Role`, the same
worker class either in the job's process or in a Ray actor, called the same way::

    generator   GeneratorWorker   generate / evaluate / load_weights / sleep      (generator.py)
    policy      PolicyWorker      train_step / get_weights / save / load         (policy.py)
    critic      CriticWorker      compute_values / train_step / save / load      (critic.py; gae only)
    reference   ReferenceWorker   logprobs                                       (policy.py; use_kl_loss only)

Where each role lives is decided once, by :meth:`Workers.create` from the config:

- colocated on CPU (``trainer.placement.colocate_all=true``, the torch backend, no CUDA): every role
  in the job's process, taking turns on its cores (one copy of torch, no actor start-up);
- otherwise the placement groups of :mod:`skyrl_engine.placement`: the policy in its bundle, the torch
  generator in the engine bundle (with vLLM, the generator role stays in the job's process and its
  engines are actors in the engine bundles), critic and reference actors beside the policy.

Weights move by :meth:`Workers.export_weights` (a snapshot: an object ref when the policy is an actor)
and :meth:`Workers.load_weights` (Ray hands a ref straight to a generator actor), so a synchronous step,
the one-step pipeline and the fully async one share the same two halves.

One idea, the seam between the loops and the roles; its length is the four roles' placements (in process, actors).
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from skyrl_engine.critic import CriticWorker, critic_model_path, needs_critic
from skyrl_engine.generator import GeneratorWorker
from skyrl_engine.placement import Placement, plan_placement
from skyrl_engine.policy import PolicyWorker, ReferenceWorker
from skyrl_engine.tasks import env_configs_from_environ

if TYPE_CHECKING:
    from skyrl_core.config import JobConfig, SamplingParams
    from skyrl_engine.types import GeneratorOutput, PromptRow, TrainBatch

__all__ = ["RankGroup", "Role", "Workers", "runs_in_job_process", "uses_vllm"]


_PEER_ERROR_WAIT_S = 5.0  # after one rank fails, how long the others' errors are awaited (to name a dead one)


def _is_ref(value: Any) -> bool:
    return type(value).__name__ == "ObjectRef"


class Role:
    """One role's worker: an object in this process or a Ray actor handle, called alike.

    >>> Role(PolicyWorker(...)).call("train_step", batch)          # doctest: +SKIP
    >>> Role.actor(PolicyWorker, options, ...).call("train_step", batch)   # doctest: +SKIP
    """

    def __init__(self, worker: Any, *, remote: bool = False, name: str = "") -> None:
        self.worker = worker
        self.remote = remote
        self.name = name or (type(worker).__name__ if not remote else "actor")

    @classmethod
    def actor(cls, worker_cls: type, options: dict[str, Any], *args: Any, **kwargs: Any) -> Role:
        """Start ``worker_cls(*args, **kwargs)`` as a Ray actor with ``options`` (resources, placement)."""
        import ray

        handle = ray.remote(worker_cls).options(**options).remote(*args, **kwargs)
        return cls(handle, remote=True, name=worker_cls.__name__)

    def submit(self, method: str, *args: Any) -> Any:
        """Start ``method(*args)``: an object ref for an actor, the result itself in this process.

        Object refs among ``args`` reach an actor as refs (Ray resolves them there) and are fetched
        first for a worker in this process.
        """
        if self.remote:
            return getattr(self.worker, method).remote(*args)
        if any(_is_ref(a) for a in args):
            import ray

            args = tuple(ray.get(a) if _is_ref(a) else a for a in args)
        return getattr(self.worker, method)(*args)

    def call(self, method: str, *args: Any) -> Any:
        """``method(*args)`` to completion; its result."""
        return self.wait(self.submit(method, *args))

    @staticmethod
    def wait(pending: Any) -> Any:
        """The result of :meth:`submit` (a list of them in one wait)."""
        if isinstance(pending, list):
            refs = [p for p in pending if _is_ref(p)]
            if not refs:
                return pending
            import ray

            done = iter(ray.get(refs))  # one wait for all the actors' results, in order
            return [next(done) if _is_ref(p) else p for p in pending]
        if _is_ref(pending):
            import ray

            return ray.get(pending)
        return pending

    def close(self) -> None:
        """Kill an actor (nothing to do in this process beyond the worker's own shutdown)."""
        if self.remote:
            import ray

            try:
                ray.kill(self.worker)
            except Exception:  # noqa: BLE001 - the actor may already be gone
                pass

    def __repr__(self) -> str:
        return f"{self.name} ({'Ray actor' if self.remote else 'in process'})"


class RankGroup(Role):
    """A role on N Ray actors of one worker class that form one ``torch.distributed`` group
    (:mod:`skyrl_engine.distributed`), called as one role: every rank runs each call (the collectives
    need them all) and the group answers with rank 0's result. A rank that dies fails the call with an
    error naming it."""

    def __init__(self, handles: list[Any], name: str) -> None:
        super().__init__(handles[0], remote=True, name=name)
        self.handles = handles
        self.ranks: list[dict[str, Any]] = []

    @classmethod
    def start(cls, worker_cls: type, options: list[dict[str, Any]], strategy: str, *args: Any) -> RankGroup:
        """``worker_cls(*args, rank=r, world_size=N)`` on each of the N ``options``; then the group meets
        at rank 0's address and each rank wraps its model with ``strategy``."""
        import ray

        world = len(options)
        handles = [ray.remote(worker_cls).options(**opt).remote(*args, rank=rank, world_size=world)
                   for rank, opt in enumerate(options)]
        group = cls(handles, name=f"{worker_cls.__name__} × {world}")
        try:
            address = group._all([handles[0].rendezvous.remote()])[0]
            group.ranks = group._all([h.join_group.remote(address, strategy) for h in handles])
        except BaseException:
            group.close()
            raise
        return group

    def _all(self, refs: list[Any], fetch: bool = True) -> list[Any]:
        """Every rank's result, in rank order; ``fetch=False`` leaves rank 0's result where it is (its ref,
        once done: a weight snapshot need not pass through this process; an error in it surfaces where
        it is used). A failure raises one line naming the rank: a rank whose process died is named before
        the ranks that fail because a peer left their collective."""
        import ray

        results: dict[int, Any] = {}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1, fetch_local=fetch)
            rank = refs.index(done[0])
            try:
                results[rank] = ray.get(done[0]) if fetch or rank else done[0]
            except Exception as exc:
                raise self._failure(refs, rank, exc) from exc
        return [results[rank] for rank in range(len(refs))]

    def _failure(self, refs: list[Any], rank: int, exc: Exception) -> RuntimeError:
        import ray

        errors = {rank: exc}
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=_PEER_ERROR_WAIT_S, fetch_local=False)
        for ref in ready:  # the others' errors, the dead rank's among them
            other = refs.index(ref)
            if other not in errors:
                try:
                    ray.get(ref, timeout=0)
                except Exception as err:  # noqa: BLE001 - each rank's failure, sorted below
                    errors[other] = err
        dead = [r for r, err in sorted(errors.items()) if isinstance(err, ray.exceptions.RayActorError)]
        rank = dead[0] if dead else min(errors)
        err = errors[rank]
        last_line = (str(err).strip().splitlines() or [""])[-1][:300]
        what = "died (its process exited)" if dead else "failed"  # not a run state: what the rank did
        return RuntimeError(f"{self.name}: rank {rank} {what}: {type(err).__name__}: {last_line}")

    def submit(self, method: str, *args: Any) -> Any:
        """Run ``method(*args)`` on every rank and wait for all of them (a rank that fails is named here,
        not left hanging in a collective); rank 0's object ref."""
        return self._all([getattr(h, method).remote(*args) for h in self.handles], fetch=False)[0]

    def call(self, method: str, *args: Any) -> Any:
        return self._all([getattr(h, method).remote(*args) for h in self.handles])[0]

    def close(self) -> None:
        for handle in self.handles:
            Role(handle, remote=True).close()

    def __repr__(self) -> str:
        strategy = self.ranks[0]["strategy"] if self.ranks else "not joined"
        return f"{self.name} (Ray actors, {strategy})"


class Workers:
    """The roles of one job; the loops' only way to generate, train, sync weights and checkpoint."""

    def __init__(self, generator: Role, policy: Role, critic: Role | None = None, reference: Role | None = None,
                 *, placement: Any | None = None, colocated: bool = False, adapter_sync: bool = False) -> None:
        self.generator = generator
        self.policy = policy
        self.critic = critic
        self.reference = reference
        self.placement = placement
        self.colocated = colocated
        self.adapter_sync = adapter_sync
        """A LoRA policy whose generator merges adapters itself: a sync sends the adapters alone."""
        self.last_sync: dict[str, float] = {}
        """``{"seconds", "bytes"}`` of the last :meth:`load_weights` on the generator's side."""

    # -- building -------------------------------------------------------------------------------
    @classmethod
    def create(cls, cfg: JobConfig, model_path: str, total_steps: int, *, in_process: bool | None = None,
               vllm_python: str | None = None, env_configs: dict[str, dict[str, Any]] | None = None,
               engine_kwargs: dict[str, Any] | None = None, generator_backend: Any = None) -> Workers:
        """Every role ``cfg`` needs, where its placement puts it (see the module docstring).

        ``in_process`` overrides the choice (True: all roles here, e.g. when Ray could not start);
        ``env_configs`` are the environments' settings (``tasks.env_configs_from_environ()`` by default);
        ``generator_backend`` is a running generation backend to use instead of starting one (a generator
        role in this process only: vLLM's, or all roles in process).
        """
        from skyrl_core.config import critic_ranks, policy_ranks

        t, g = cfg.trainer, cfg.generator
        threads = int(t.num_threads)
        plugins = list(cfg.plugins)
        vllm = uses_vllm(cfg)
        if in_process is None:
            in_process = runs_in_job_process(cfg)
        if in_process and vllm:
            raise ValueError("generator.inference_engine.backend: 'vllm' engines are Ray actors; they cannot run "
                             "in the job's process")
        if generator_backend is not None and not (in_process or vllm):
            raise ValueError("generator_backend: the torch generator of a disaggregated run is a Ray actor with its "
                             "own sampler; hand in a backend only for a generator in this process")
        generator_opts = {"vllm_python": vllm_python, "env_configs": env_configs, "engine_kwargs": engine_kwargs,
                          "generator_backend": generator_backend}
        policy_args = (model_path, t, g.sampling_params.temperature, total_steps, threads, plugins)
        critic_args = (critic_model_path(cfg, model_path), t, total_steps, threads, plugins) if needs_critic(cfg) else None
        reference_args = (model_path, t, g.sampling_params.temperature, threads, plugins) if t.algorithm.use_kl_loss else None
        lora = bool(t.policy.model.lora.rank)
        if in_process:
            generator = cls.generator_role(cfg, model_path, **generator_opts)
            return cls(
                generator=generator,
                policy=Role(PolicyWorker(*policy_args)),
                critic=Role(CriticWorker(*critic_args)) if critic_args else None,
                reference=Role(ReferenceWorker(*reference_args)) if reference_args else None,
                colocated=bool(t.placement.colocate_all),
                adapter_sync=lora and generator.call("accepts_lora_adapter"),
            )

        # PlacementError (one line) when the cluster cannot hold what trainer.placement asks for
        placement = Placement.create(plan_placement(cfg))
        roles: list[Role] = []
        try:
            policy = cls._ranked(PolicyWorker, policy_ranks(cfg), placement.policy_options, str(t.strategy),
                                 policy_args)
            roles.append(policy)
            generator = cls.generator_role(cfg, model_path, placement, **generator_opts)
            roles.append(generator)
            # No CPU of their own: their passes and the policy's never run at the same time.
            critic = cls._ranked(CriticWorker, critic_ranks(cfg), placement.critic_options, str(t.strategy),
                                 critic_args) if critic_args else None
            if critic is not None:
                roles.append(critic)
            reference = Role.actor(ReferenceWorker, {"num_cpus": 0}, *reference_args) if reference_args else None
            if reference is not None:
                roles.append(reference)
            Role.wait([r.submit("ping") for r in roles])
            adapter_sync = lora and generator.call("accepts_lora_adapter")
        except BaseException:
            for role in roles:
                role.close()
            placement.remove()
            raise
        return cls(generator, policy, critic, reference, placement=placement, colocated=bool(t.placement.colocate_all),
                   adapter_sync=adapter_sync)

    @staticmethod
    def _ranked(worker_cls: type, ranks: int, options: Any, strategy: str, args: tuple[Any, ...]) -> Role:
        """One actor (``ranks`` 1) or a :class:`RankGroup` of ``ranks`` actors; ``options(rank)`` places each."""
        if ranks > 1:
            return RankGroup.start(worker_cls, [options(r) for r in range(ranks)], strategy, *args)
        return Role.actor(worker_cls, options(0), *args)

    @staticmethod
    def generator_role(cfg: JobConfig, model_path: str, placement: Any | None = None, *,
                       vllm_python: str | None = None, env_configs: dict[str, dict[str, Any]] | None = None,
                       engine_kwargs: dict[str, Any] | None = None, generator_backend: Any = None) -> Role:
        """The generator role of ``cfg`` (its backend, loop and environments), as :meth:`create` places it:
        in this process without a ``placement``; with one, a Ray actor in its first engine bundle, except
        with vLLM, whose role stays here while its engines are actors in the engine bundles."""

        t = cfg.trainer
        kwargs = {"num_threads": int(t.num_threads), "plugins": list(cfg.plugins),
                  "env_configs": env_configs_from_environ() if env_configs is None else env_configs,
                  "colocated": bool(t.placement.colocate_all), "vllm_python": vllm_python, "seed": int(t.seed),
                  # vLLM engines tag their queue and KV-cache gauges with the run (skyrl_engine.vllm_metrics)
                  "engine_kwargs": {"metrics_run_id": cfg.run.run_id, **(engine_kwargs or {})},
                  "backend": generator_backend,
                  "reward": cfg.reward if cfg.reward.functions else None, "run_dir": str(cfg.run_dir),
                  "shipped_envs": dict(cfg.environment.shipped)}
        if placement is None or uses_vllm(cfg):
            return Role(GeneratorWorker(model_path, cfg.generator, placement=placement, **kwargs))
        return Role.actor(GeneratorWorker, placement.engine_options(0), model_path, cfg.generator, **kwargs)

    # -- rollouts -------------------------------------------------------------------------------
    def generate(self, rows: list[PromptRow], n: int, params: SamplingParams, seed: int) -> GeneratorOutput:
        """``n`` scored rollouts per row with the generator's current weights."""
        return self.generator.call("generate", rows, n, params, seed)

    def evaluate(self, rows: list[PromptRow], n: int, params: SamplingParams, seed: int, batch_size: int) -> dict:
        """Mean reward over ``rows`` with the generator's current weights."""
        return self.generator.call("evaluate", rows, n, params, seed, batch_size)

    # -- training -------------------------------------------------------------------------------
    def reference_logprobs(self, batch: TrainBatch) -> Any:
        """The reference's log-probs of the batch (``use_kl_loss``); None without a reference role."""
        return None if self.reference is None else self.reference.call("logprobs", batch)

    def critic_values(self, batch: TrainBatch) -> Any:
        """The critic's values of the batch before its update (gae)."""
        return self.critic.call("compute_values", batch)

    def critic_train_step(self, batch: TrainBatch) -> dict[str, float]:
        """One critic update on the batch (gae); ``critic/*`` metrics."""
        return self.critic.call("train_step", batch)

    def train_step(self, batch: TrainBatch) -> dict[str, float]:
        """One policy update on the batch; ``policy/*`` metrics. Colocated engines sleep meanwhile."""
        if self.colocated:
            self.generator.call("sleep")
        return self.policy.call("train_step", batch)

    # -- weights --------------------------------------------------------------------------------
    def export_weights(self) -> Any:
        """Trainer side of a sync: a snapshot of the policy's weights (an object ref for an actor).

        The snapshot is taken before this returns, so the policy may go on training meanwhile.
        """
        pending = self.policy.submit("get_weights", self.adapter_sync)
        if _is_ref(pending):
            import ray

            ray.wait([pending])
        return pending

    def load_weights(self, weights: Any) -> None:
        """Generator side of a sync: install a snapshot from :meth:`export_weights` (what it took and moved:
        :attr:`last_sync`)."""
        self.last_sync = self.generator.call("load_weights", weights)

    def sync_weights(self) -> None:
        """Policy → generator (``timing/sync_weights``): the whole model, or a LoRA policy's adapters alone
        where the generator merges them itself."""
        self.load_weights(self.export_weights())

    def policy_parameters(self) -> dict[str, Any]:
        """``{"total", "trainable", "lora_rank"}`` of the policy."""
        return self.policy.call("parameter_counts")

    # -- state ----------------------------------------------------------------------------------
    def save_checkpoint(self, ckpt_dir: str, extra: dict[str, Any]) -> None:
        """Policy (and critic) state into ``ckpt_dir``."""
        pending = [self.policy.submit("save_checkpoint", ckpt_dir, extra)]
        if self.critic is not None:
            pending.append(self.critic.submit("save_checkpoint", ckpt_dir, extra))
        Role.wait(pending)

    def load_checkpoint(self, ckpt_dir: str) -> dict[str, Any]:
        """Restore policy (and critic) from ``ckpt_dir``, then sync the generator; the policy's extra state."""
        extra = self.policy.call("load_checkpoint", ckpt_dir)
        if self.critic is not None:
            self.critic.call("load_checkpoint", ckpt_dir)
        self.sync_weights()
        return extra

    def shutdown(self) -> None:
        """Stop the generator's backend, kill the actors, give the placement back."""
        try:
            if not self.generator.remote:
                self.generator.call("shutdown")
        finally:
            for role in (self.generator, self.policy, self.critic, self.reference):
                if role is not None:
                    role.close()
            if self.placement is not None:
                self.placement.remove()

    # -- display --------------------------------------------------------------------------------
    def policy_ranks(self) -> list[dict[str, Any]]:
        """Each policy rank's ``{rank, strategy, node_id, pid}`` when the policy is on several ranks, else []."""
        return list(getattr(self.policy, "ranks", []))

    def critic_ranks(self) -> list[dict[str, Any]]:
        """Each critic rank's record when the critic is on several ranks, else []."""
        return list(getattr(self.critic, "ranks", []))

    def roles(self) -> dict[str, Role]:
        """The roles this job has, by name."""
        named = {"generator": self.generator, "policy": self.policy, "critic": self.critic,
                 "reference": self.reference}
        return {k: v for k, v in named.items() if v is not None}

    def __repr__(self) -> str:
        where = self.placement.plan.describe() if self.placement is not None else "all in the job's process"
        roles = ", ".join(f"{k}: {v!r}" for k, v in self.roles().items())
        return f"Workers({where}; {roles})"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self))}</code>"


def uses_vllm(cfg: JobConfig) -> bool:
    """``generator.inference_engine.backend=vllm``: the generator samples with vLLM engine actors."""
    from skyrl_core.choices import Backend

    return cfg.generator.inference_engine.backend == Backend.VLLM


def runs_in_job_process(cfg: JobConfig) -> bool:
    """True for a colocated run of the torch backend on CPU: every role lives in the job's own process.

    Disaggregated runs (``trainer.placement.colocate_all=false``) put the roles in Ray actors with their
    own bundles; on a machine with CUDA colocated runs use actors that share the GPUs.
    """
    from skyrl_core.placement import colocated_in_one_process
    from skyrl_core.placement import runs_in_job_process as on_device

    if not colocated_in_one_process(cfg):  # the rule is skyrl_core's: the form and launch apply the same one
        return False
    import torch

    return on_device(cfg, "GPU" if torch.cuda.is_available() else "CPU")
