"""The preflight's model checks: the model's ``config.json`` and parameter count (read offline),
its shape, LongRoPE's rollout/actor mismatch, and the per-GPU memory estimate with its verdict."""

from __future__ import annotations

import json
import math
import os
import shutil
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from recipe.arise.tools.preflight_common import ALLOW_LONGROPE, DTYPE_BYTES, SKILL_ROOM, Finding, GiB, select


def find_model_file(model: str, filename: str) -> Path | None:
    """``filename`` of a local model folder or of a hub id in the local Hugging Face cache (no network)."""
    local = Path(model)
    if local.is_dir():
        return local / filename if (local / filename).exists() else None
    if model.count("/") != 1 or local.exists():
        return None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(model, filename)
    except Exception:
        return None
    return Path(found) if isinstance(found, str) and os.path.exists(found) else None


def read_model_config(model: str) -> dict | None:
    path = find_model_file(model, "config.json")
    return json.loads(path.read_text()) if path else None


def _safetensors_params(path: Path) -> int:
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    return sum(math.prod(t["shape"]) for key, t in header.items() if key != "__metadata__")


def count_params(model: str, config: dict) -> int | None:
    """Exact parameter count from the safetensors headers or index, when they are reachable."""
    single = find_model_file(model, "model.safetensors")
    if single is not None:
        try:
            return _safetensors_params(single)
        except (OSError, ValueError, KeyError, struct.error):
            return None
    index = find_model_file(model, "model.safetensors.index.json")
    if index is not None:
        try:
            total = json.loads(index.read_text())["metadata"]["total_size"]
        except (OSError, ValueError, KeyError):
            return None
        dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
        return int(total) // DTYPE_BYTES.get(dtype, 2)
    return None


@dataclass
class ModelShape:
    num_params: int
    num_layers: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    vocab_size: int
    max_position_embeddings: int | None
    params_counted: bool = False  # True: from the weights' headers; False: from the shape


def model_shape(config: dict, num_params: int | None = None) -> ModelShape:
    """The shape numbers the estimate needs, from a Hugging Face ``config.json``."""
    text = config.get("text_config") or config
    hidden = int(text["hidden_size"])
    layers = int(text["num_hidden_layers"])
    heads = int(text["num_attention_heads"])
    kv_heads = int(text.get("num_key_value_heads") or heads)
    head_dim = int(text.get("head_dim") or hidden // heads)
    vocab = int(text.get("vocab_size") or config["vocab_size"])
    counted = num_params is not None
    if num_params is None:
        tied = bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False)))
        experts = int(text.get("num_experts") or text.get("num_local_experts") or 1)
        inter = int(text.get("moe_intermediate_size") if experts > 1 else 0) or int(
            text.get("intermediate_size") or 4 * hidden
        )
        attn = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
        mlp = 3 * hidden * inter * experts
        num_params = vocab * hidden * (1 if tied else 2) + layers * (attn + mlp + 2 * hidden) + hidden
    return ModelShape(
        num_params=int(num_params),
        num_layers=layers,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        hidden_size=hidden,
        vocab_size=vocab,
        max_position_embeddings=text.get("max_position_embeddings"),
        params_counted=counted,
    )


# ------------------------------------------------------------------------------------------ memory
CUDA_CONTEXTS_GIB = 1.0  # the actor's and vLLM's CUDA contexts and NCCL buffers on one GPU
VLLM_OVERHEAD_GIB = 2.0  # vLLM's activation peak (profiled at start-up) besides weights and KV cache
CUDA_GRAPHS_GIB = 1.0  # captured CUDA graphs (not with enforce_eager)


@dataclass
class MemoryEstimate:
    gpu_gib: float
    gpu_source: str
    n_gpus: int
    tp: int
    actor_gib: float  # FSDP while it trains: fp32 params + grads + AdamW m, v, sharded over n GPUs
    logits_gib: float  # one micro-batch's logits and their gradient (bf16)
    activations_gib: float
    train_peak_gib: float
    rollout_peak_gib: float  # the actor's rollout state + what vLLM claims (gpu_memory_utilization x GPU)
    vllm_reserved_gib: float
    vllm_weights_gib: float
    vllm_overhead_gib: float
    kv_gib: float
    kv_bytes_per_token: int
    max_model_len: int
    full_length_seqs: int
    seqs_per_replica: int
    actor_rollout_gib: float = 0.0  # what the actor keeps during rollout: params + AdamW m, v (grads freed)
    findings: list[Finding] = field(default_factory=list)

    @property
    def level(self) -> str:
        levels = [f.level for f in self.findings]
        return "ERROR" if "ERROR" in levels else "WARNING" if "WARNING" in levels else "OK"

    def lines(self) -> list[str]:
        rows = [
            (f"actor (FSDP: fp32 params + grads + AdamW m, v; /{self.n_gpus})", self.actor_gib),
            ("+ one micro-batch's logits and their grad (bf16)", self.logits_gib),
            ("+ checkpointed activations", self.activations_gib),
            ("= training peak (rollout engine asleep)", self.train_peak_gib),
            (f"actor during rollout (params + AdamW m, v; no grads; /{self.n_gpus})", self.actor_rollout_gib),
            ("+ rollout engine: gpu_memory_utilization x GPU", self.vllm_reserved_gib),
            ("= rollout peak (actor state + engine)", self.rollout_peak_gib),
        ]
        lines = [f"memory per GPU ({self.gpu_gib:.1f} GiB, {self.gpu_source}; {self.n_gpus} GPU(s), TP {self.tp}):"]
        lines += [f"  {label:<58} {gib:6.1f} GiB" for label, gib in rows]
        lines.insert(
            7,
            f"    engine = weights {self.vllm_weights_gib:.1f} + overhead {self.vllm_overhead_gib:.1f}"
            f" + KV cache {self.kv_gib:.1f} GiB ({self.kv_bytes_per_token / 1024:.0f} KiB/token)",
        )
        lines.append(
            f"  KV cache holds {self.full_length_seqs} sequences of max_model_len {self.max_model_len} at once;"
            f" a step sends up to {self.seqs_per_replica} per replica"
        )
        return lines


def nvidia_smi(query: str) -> str | None:
    """nvidia-smi's answer to ``--query-gpu=QUERY`` (one line per GPU, no header, no units); None
    without nvidia-smi or when it fails. Creates no CUDA context."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        return subprocess.run(
            [smi, f"--query-gpu={query}", "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=20
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def gpu_memory_gib() -> float | None:
    """The smallest GPU's memory from nvidia-smi (no CUDA context is created), None without it."""
    try:
        values = [float(v) for v in (nvidia_smi("memory.total") or "").split() if v.strip()]
    except ValueError:
        return None
    return min(values) / 1024 if values else None


def actor_bytes_per_param(actor_cfg) -> tuple[int, int]:
    """Bytes per parameter the actor holds on each GPU (before sharding): (while it trains, during rollout).

    verl 0.9.1's v1 trainer runs the actor on its FSDP engine (verl/workers/engine/fsdp/transformer_impl.py):
    weights in ``fsdp_config.model_dtype`` (fp32), their grads and AdamW's m and v in the same dtype: 4 x 4 =
    16 bytes while it trains. The grads do not outlive the update: ``TrainingWorker.train_mini_batch``
    (verl/workers/engine_workers.py) runs it inside ``engine.train_mode()``, whose
    ``EngineTrainModeCtx.__exit__`` calls ``FSDPEngine.optimizer_zero_grad`` -> ``optimizer.zero_grad()``
    (torch's default ``set_to_none=True`` frees them). While vLLM generates, the actor keeps weights + m, v:
    12 bytes. ``param_offload`` / ``optimizer_offload`` move weights / optimizer state to the CPU outside
    ``train_mode`` and back for the update (``BaseEngineCtx._context_switch``, verl/workers/engine/base.py):
    they lower the rollout figure, not the training one; FSDP2's ``offload_policy`` keeps all of it on the CPU."""
    fsdp = actor_cfg.get("fsdp_config", None) or {}
    if fsdp.get("offload_policy", False):
        return 0, 0
    weight = DTYPE_BYTES.get(str(fsdp.get("model_dtype", "fp32")), 4)
    train = weight * 4  # weights, grads, AdamW m and v
    rollout = (0 if fsdp.get("param_offload", False) else weight) + (
        0 if fsdp.get("optimizer_offload", False) else 2 * weight
    )
    return train, rollout


def estimate_memory(cfg, shape: ModelShape, gpu_gib: float, gpu_source: str = "given") -> MemoryEstimate:
    """Per-GPU memory of a colocated (hybrid-engine) run, and a verdict with the override to change."""
    actor_cfg = cfg.actor_rollout_ref.actor
    rollout = cfg.actor_rollout_ref.rollout
    n_gpus = int(cfg.trainer.n_gpus_per_node) * int(cfg.trainer.nnodes)
    tp = int(rollout.tensor_model_parallel_size)
    params = shape.num_params
    actor, actor_rollout = (params * b / n_gpus / GiB for b in actor_bytes_per_param(actor_cfg))

    prompt, response = int(cfg.data.max_prompt_length), int(cfg.data.max_response_length)
    micro = int(actor_cfg.get("ppo_micro_batch_size_per_gpu") or 1)
    tokens = micro * (prompt + response)
    logits = 2 * tokens * shape.vocab_size * 2 / GiB
    checkpointing = bool(cfg.actor_rollout_ref.model.get("enable_gradient_checkpointing", True))
    per_layer = tokens * shape.hidden_size * 2 * (1 if checkpointing else 16)
    activations = shape.num_layers * per_layer / GiB
    train_peak = CUDA_CONTEXTS_GIB + actor + logits + activations

    util = float(rollout.gpu_memory_utilization)
    reserved = util * gpu_gib
    dtype_bytes = DTYPE_BYTES.get(str(rollout.get("dtype", "bfloat16")), 2)
    weights = params * dtype_bytes / tp / GiB
    overhead = VLLM_OVERHEAD_GIB + (0.0 if rollout.get("enforce_eager", False) else CUDA_GRAPHS_GIB)
    kv = reserved - weights - overhead
    kv_heads = max(1, shape.num_kv_heads // tp)
    kv_per_token = 2 * shape.num_layers * kv_heads * shape.head_dim * dtype_bytes
    max_len = int(rollout.get("max_model_len") or shape.max_position_embeddings or (prompt + response))
    full_seqs = max(0, int(kv * GiB // (kv_per_token * max_len)))
    replicas = max(1, n_gpus // tp)
    per_replica = math.ceil(int(cfg.data.train_batch_size) * int(rollout.n) / replicas)
    rollout_peak = CUDA_CONTEXTS_GIB + actor_rollout + reserved
    if not rollout.get("free_cache_engine", True):
        train_peak += reserved  # the engine keeps its memory while the actor trains

    est = MemoryEstimate(
        gpu_gib=gpu_gib,
        gpu_source=gpu_source,
        n_gpus=n_gpus,
        tp=tp,
        actor_gib=actor,
        logits_gib=logits,
        activations_gib=activations,
        train_peak_gib=train_peak,
        rollout_peak_gib=rollout_peak,
        vllm_reserved_gib=reserved,
        vllm_weights_gib=weights,
        vllm_overhead_gib=overhead,
        kv_gib=kv,
        kv_bytes_per_token=kv_per_token,
        max_model_len=max_len,
        full_length_seqs=full_seqs,
        seqs_per_replica=per_replica,
        actor_rollout_gib=actor_rollout,
    )
    findings = est.findings
    if rollout_peak > gpu_gib:
        room = math.floor((gpu_gib - CUDA_CONTEXTS_GIB - actor_rollout) / gpu_gib * 20) / 20
        fix = (
            f"GPU_MEM_UTIL={room:.2f} (actor_rollout_ref.rollout.gpu_memory_utilization)"
            if room >= 0.2
            else "more GPUs (GPUS_PER_NODE/NNODES), or actor_rollout_ref.actor.fsdp_config.optimizer_offload=True"
        )
        findings.append(
            Finding(
                "ERROR",
                f"actor state {actor_rollout:.1f} GiB + the engine's {util} x {gpu_gib:.0f} GiB exceed the GPU: "
                "vLLM refuses to start (free memory below gpu_memory_utilization) or the run runs out of memory",
                fix,
            )
        )
    if kv <= 0 or full_seqs < 1:
        fit = int(max(kv, 0) * GiB // kv_per_token)
        findings.append(
            Finding(
                "ERROR",
                f"KV cache {kv:.1f} GiB cannot hold one sequence of max_model_len {max_len} "
                f"({kv_per_token * max_len / GiB:.1f} GiB): vLLM refuses to start",
                f"MAX_MODEL_LEN<={fit} (actor_rollout_ref.rollout.max_model_len), a higher GPU_MEM_UTIL, or TP",
            )
        )
    elif full_seqs < per_replica / 2:
        findings.append(
            Finding(
                "WARNING",
                f"the KV cache holds {full_seqs} full-length sequences, a step sends {per_replica} per replica: "
                "long rollouts queue or are preempted (slower, not an error)",
                "a higher GPU_MEM_UTIL, TP, or a smaller MAX_RESPONSE",
            )
        )
    if train_peak > gpu_gib:
        findings.append(
            Finding(
                "ERROR",
                f"training peak {train_peak:.1f} GiB exceeds the GPU",
                f"MICRO_BATCH={max(1, micro // 2)} (actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu)",
            )
        )
    if not findings:
        findings.append(Finding("OK", "memory estimate fits"))
    return est


# ------------------------------------------------------------------------------------------ LongRoPE
def longrope(config: dict) -> int | None:
    """original_max_position_embeddings of a LongRoPE model's ``config.json``, else None."""
    text = config.get("text_config") or config
    rope = text.get("rope_scaling") or text.get("rope_parameters") or {}
    if not isinstance(rope, dict) or (rope.get("rope_type") or rope.get("type")) != "longrope":
        return None
    original = rope.get("original_max_position_embeddings") or text.get("original_max_position_embeddings")
    return int(original) if original else None


def check_longrope(cfg, config: dict) -> list[Finding]:
    """vLLM picks LongRoPE's long factors for every position once max_model_len exceeds the original
    positions (vllm Phi3LongRoPEScaledRotaryEmbedding: use_long_rope); transformers picks them per
    forward, only when the sequence is longer (modeling_rope_utils: longrope_frequency_update). Above
    the original length the actor's micro-batches of shorter sequences use the short ones: the
    rollouts and the update then come from two different policies."""
    original = longrope(config)
    if original is None:
        return []
    max_len = select(cfg, "actor_rollout_ref.rollout.max_model_len")
    if max_len is not None and int(max_len) <= original:
        return [
            Finding(
                "OK",
                f"LongRoPE (original_max_position_embeddings {original}): max_model_len {max_len} keeps vLLM and the "
                "actor on the short factors",
            )
        ]
    correction = select(cfg, "algorithm.rollout_correction") or {}
    corrected = bool(correction.get("rollout_is") or correction.get("rollout_rs")) if correction else False
    allowed = os.environ.get(ALLOW_LONGROPE) == "1"
    prompt = int(cfg.data.max_prompt_length)
    return [
        Finding(
            "WARNING" if corrected or allowed else "ERROR",
            f"LongRoPE (original_max_position_embeddings {original}) with rollout.max_model_len {max_len}: vLLM uses "
            f"the long factors at every position, the actor the short ones for micro-batches of <= {original} tokens, "
            "so rollouts and updates come from different policies (training/rollout_probs_diff_*)"
            + (" - verl's rollout correction reweights them" if corrected else ""),
            f"MAX_MODEL_LEN<={original} (MAX_RESPONSE={original - prompt - SKILL_ROOM} with MAX_PROMPT={prompt}; "
            f"the phi4_mini profile of run_scripts/common.sh), or algorithm.rollout_correction.rollout_is=token, "
            f"or {ALLOW_LONGROPE}=1 to run as is",
        )
    ]
