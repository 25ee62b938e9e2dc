from baselines.mem0.system import Mem0System

__all__ = ["Mem0System"]
