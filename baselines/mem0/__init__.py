from baselines.mem0.system import Mem0System
from baselines.mem0.system_v2 import mem0_v2_system

__all__ = ["Mem0System", "mem0_v2_system"]
