"""Simulated GPU memory readers for ``gpu: auto`` (``TUNER_GPU_MEMORY_READER=tests.gpu_readers:<name>``), in place
of NVML on a machine with Ray's logical GPUs only."""

from tuner.resources.gpu_packing import GpuMemory

GIB = 2**30


def roomy():
    """One 16 GiB GPU with 15 GiB free."""
    return [GpuMemory(16 * GIB, 15 * GIB)]


def full():
    """One 16 GiB GPU that another process has filled (64 MiB free)."""
    return [GpuMemory(16 * GIB, 64 * 2**20)]


def broken():
    """NVML without a driver."""
    raise RuntimeError("NVML Shared Library Not Found (simulated)")
