"""CPUs and memory a sandbox gets: what the task asks for, within what this machine has.

A task written for a bigger machine (4 CPUs on this 2-core one) runs with what there is rather
than failing on Docker's "Range of CPUs is from 0.01 to 2.00"; the run says so once, and each
result.json records both figures (`sandbox_resources`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class HostResources:
    cpus: float
    memory_mb: int


@dataclass(frozen=True)
class Grant:
    cpus: float
    memory_mb: int
    requested_cpus: float
    requested_memory_mb: int

    @property
    def reduced(self) -> bool:
        return self.cpus < self.requested_cpus or self.memory_mb < self.requested_memory_mb

    def record(self) -> dict[str, Any]:
        """result.json's sandbox_resources."""
        return {
            "cpus": self.cpus,
            "memory_mb": self.memory_mb,
            "requested_cpus": self.requested_cpus,
            "requested_memory_mb": self.requested_memory_mb,
            "reduced": self.reduced,
        }


def host_resources(client: Any) -> HostResources:
    """What the Docker engine's machine has (its CPUs and memory)."""
    info = client.info()
    return HostResources(float(info.get("NCPU") or 1), int(info.get("MemTotal") or 0) // 2**20)


def grant(cpus: float, memory_mb: int, host: HostResources) -> Grant:
    return Grant(
        cpus=min(cpus, host.cpus),
        memory_mb=min(memory_mb, host.memory_mb) if host.memory_mb else memory_mb,
        requested_cpus=cpus,
        requested_memory_mb=memory_mb,
    )
