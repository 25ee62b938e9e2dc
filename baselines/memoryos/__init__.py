from baselines.memoryos.system import MemoryOSSystem

__all__ = ["MemoryOSSystem"]
