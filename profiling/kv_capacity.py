"""How many KV-cache tokens one serving instance holds, from its hardware and its model.

Why: one KV capacity for every instance (the old 400,000 tokens) made a single A100-40GB serving
an 8B model hold as much as four H100s serving a 70B one, so the simulator could not show where a
long prompt fits, nor what a router gains by keeping shared prefixes where they are cached.

vLLM's arithmetic, as its memory profiler does it (less the activation peak it also subtracts, which
this leaves out, so capacities come out a few per cent high):
    KV bytes  = accelerators × memory per accelerator × gpu_memory_utilization − weight bytes
    per token = layers × KV heads × head dim × 2 (K and V) × bytes per element
    tokens    = KV bytes / per token
Tensor parallelism splits both the weights and the KV heads across the instance's accelerators,
so totals over the instance give the same count.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

GIB = 1 << 30
# memory per accelerator as the driver reports it (nvidia-smi's MiB total), for the kinds a fleet file names
ACCELERATOR_MEMORY_GIB = {
    "H100-80GB": 81559 / 1024,
    "H200-141GB": 143771 / 1024,
    "A100-80GB": 81920 / 1024,
    "A100-40GB": 40960 / 1024,
    "L40S": 46068 / 1024,
    "L4": 23034 / 1024,
    "A10G": 23028 / 1024,
}


class KvCapacityError(ValueError):
    """An instance whose weights leave no room for a KV cache; the message names the tier."""


@dataclass(frozen=True)
class KvCapacity:
    tokens: int
    accelerators: int
    memory_gib: float  # per accelerator
    gpu_memory_utilization: float
    weight_gib: float
    kv_bytes_per_token: int

    def to_dict(self) -> dict:
        return asdict(self)


def default_batched_tokens(memory_gib: float | None) -> int:
    """vLLM V1's `max_num_batched_tokens` for its OpenAI server: 8,192 on an accelerator of at least 70
    GiB, else 2,048 (its defaults by device memory); 8,192 where the memory is unknown."""
    return 2048 if memory_gib is not None and memory_gib < 70 else 8192


def tier_batched_tokens(config, tier) -> int:
    """A tier's per-step token budget: the fleet file's `max_num_batched_tokens`, else vLLM's default
    for its hardware (`default_batched_tokens`)."""
    if tier.max_num_batched_tokens is not None:
        return int(tier.max_num_batched_tokens)
    hardware = next((h for h in config.hardware if h.name == tier.hardware), None)
    return default_batched_tokens(None if hardware is None
                                  else accelerator_memory_gib(hardware.accelerator, hardware.memory_gib))


def accelerator_memory_gib(accelerator: str, memory_gib: float | None = None) -> float | None:
    """An accelerator's memory: the fleet file's `memory_gib` where given, else the known kinds'."""
    return memory_gib if memory_gib is not None else ACCELERATOR_MEMORY_GIB.get(accelerator)


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes: float) -> int:
    return int(layers * kv_heads * head_dim * 2 * dtype_bytes)


def kv_capacity(tier: str, accelerators: int, memory_gib: float, gpu_memory_utilization: float,
                params_b: float, layers: int, kv_heads: int, head_dim: int, dtype_bytes: float = 2.0) -> KvCapacity:
    """The KV tokens of one instance of `tier` (its name only for the error)."""
    weight = params_b * 1e9 * dtype_bytes
    free = accelerators * memory_gib * GIB * gpu_memory_utilization - weight
    per_token = kv_bytes_per_token(layers, kv_heads, head_dim, dtype_bytes)
    if free <= per_token:
        raise KvCapacityError(
            f"tier {tier}: {params_b:g}B parameters ({weight / GIB:.1f} GiB) do not leave room for a KV cache in "
            f"{accelerators} × {memory_gib:.1f} GiB at gpu_memory_utilization {gpu_memory_utilization:g}; "
            "use more accelerators (tensor_parallel_size and the hardware's count) or a smaller dtype")
    return KvCapacity(int(free // per_token), accelerators, memory_gib, gpu_memory_utilization, weight / GIB, per_token)


def tier_kv_capacity(config, tier) -> KvCapacity | None:
    """One instance of `tier` of a `FleetConfig`: its KV capacity where the fleet file tells the
    hardware's memory (or names a known accelerator) and the model's architecture; None otherwise
    (the routing evaluation's `kv_capacity_tokens` then stands in)."""
    hardware = next(h for h in config.hardware if h.name == tier.hardware)
    architecture = config.model(tier.model).architecture
    memory = accelerator_memory_gib(hardware.accelerator, hardware.memory_gib)
    if architecture is None or memory is None:
        return None
    accelerators = max(hardware.count, tier.tensor_parallel_size * tier.pipeline_parallel_size)
    return kv_capacity(tier.name, accelerators, memory, tier.gpu_memory_utilization, architecture.params_b,
                       architecture.layers, architecture.kv_heads, architecture.head_dim, architecture.dtype_bytes)
