from baselines.mem0.additive import mem0_additive_system
from baselines.mem0.system import Mem0System

__all__ = ["Mem0System", "mem0_additive_system"]
